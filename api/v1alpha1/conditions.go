package v1alpha1

// Condition types. Both kinds report Ready and Degraded; the rest are
// kind-specific. Every condition carries ObservedGeneration.
const (
	// ConditionReady: a pool has at least one ready server and its Ceph
	// backend resolves (servers down or missing show as Degraded); a
	// volume is served and hosts can connect.
	ConditionReady = "Ready"
	// ConditionDegraded: something is wrong but service continues (a pool
	// lost a server) or cannot continue (a write-back volume's server is lost).
	ConditionDegraded = "Degraded"
	// ConditionProgressing (CachePool): the DaemonSet is rolling out or
	// servers are starting.
	ConditionProgressing = "Progressing"
	// ConditionPlaced (CachedVolume): a cache server was chosen.
	ConditionPlaced = "Placed"
	// ConditionFlushed (CachedVolume): no dirty data is waiting for Ceph;
	// False with ReasonFlushing while a flush runs.
	ConditionFlushed = "Flushed"
	// ConditionMirrored (CachedVolume, pools with replicas 2): a second
	// server exports the volume and can be promoted when the owner is lost.
	ConditionMirrored = "Mirrored"
)

// Condition reasons.
const (
	// ReasonAsExpected: the condition holds for the normal reason.
	ReasonAsExpected = "AsExpected"
	// ReasonServersNotReady: some cache servers do not answer or are unhealthy.
	ReasonServersNotReady = "ServersNotReady"
	// ReasonNoServers: the node selector matches no node.
	ReasonNoServers = "NoServers"
	// ReasonRollingOut: the dataplane DaemonSet is updating.
	ReasonRollingOut = "RollingOut"
	// ReasonNotAllowed: the pool names a device path or image outside the
	// operator's allow-lists; nothing of it was applied.
	ReasonNotAllowed = "NotAllowed"
	// ReasonCephUnavailable: monitors or credentials cannot be resolved.
	ReasonCephUnavailable = "CephUnavailable"
	// ReasonPoolNotFound: the volume's CachePool does not exist.
	ReasonPoolNotFound = "PoolNotFound"
	// ReasonNoCapacity: no server (allowed by the rack rules) has room.
	ReasonNoCapacity = "NoCapacity"
	// ReasonPlacedInRack: placed on a server in the wanted rack.
	ReasonPlacedInRack = "PlacedInRack"
	// ReasonPlacedCrossRack: the wanted rack was full; placed in another rack.
	ReasonPlacedCrossRack = "PlacedCrossRack"
	// ReasonServerLost: the volume's server is gone or unreachable.
	ReasonServerLost = "ServerLost"
	// ReasonDirtyDataOnLostServer: a write-back volume's server is lost; its
	// dirty data is there, so it is not re-placed.
	ReasonDirtyDataOnLostServer = "DirtyDataOnLostServer"
	// ReasonReplaced: a write-through or write-around volume was re-placed
	// after its server was lost (the cache starts cold).
	ReasonReplaced = "Replaced"
	// ReasonPromoted: the owner was lost; its mirror was fenced off the
	// old owner and promoted (status.epoch rose).
	ReasonPromoted = "Promoted"
	// ReasonMirrorLost: the volume's mirror is lost; another is placed
	// once the pool's failover grace has passed.
	ReasonMirrorLost = "MirrorLost"
	// ReasonNotMirrored: the pool keeps one copy of each volume.
	ReasonNotMirrored = "NotMirrored"
	// ReasonWriteBackNotMirrored: the volume runs write-back and its dirty
	// data cannot be mirrored (the pool's data path uses TLS, which the
	// servers' replication channel does not), so no mirror could take over
	// without it.
	ReasonWriteBackNotMirrored = "WriteBackNotMirrored"
	// ReasonMirrorSyncing: a write-back volume's owner forwards its writes
	// to a new mirror and is still writing back the dirty data the mirror
	// lacks; the mirror can take over once that is done.
	ReasonMirrorSyncing = "MirrorSyncing"
	// ReasonMirrorReplaced: a write-back volume's mirror lost its copy
	// (its dataplane restarted without its configuration) and has an
	// empty one now; the owner is connected to it again on the next pass.
	ReasonMirrorReplaced = "MirrorReplaced"
	// ReasonLeavingWriteBack: a write-back volume is about to run another
	// mode (a snapshot's write-through hold, a change of mode); its
	// mirror's copy goes stale once the owner stops forwarding, so this is
	// stored first and the copy is made anew after.
	ReasonLeavingWriteBack = "LeavingWriteBack"
	// ReasonDataplaneError: a dataplane call failed; the message says which.
	ReasonDataplaneError = "DataplaneError"
	// ReasonCacheMetadataDamaged: the volume's cache metadata on its server
	// is damaged where its newest version was; the dataplane refuses to load
	// that cache (its dirty data cannot be vouched for).
	ReasonCacheMetadataDamaged = "CacheMetadataDamaged"
	// ReasonDirtyDataDamaged: some of the volume's write-back data failed
	// its checksum on the cache device (bit rot): hosts get a media error
	// on it and it is never written to Ceph; the rest is served.
	ReasonDirtyDataDamaged = "DirtyDataDamaged"
	// ReasonFlushing: dirty data is being written to Ceph.
	ReasonFlushing = "Flushing"
	// ReasonFlushFailed: writing dirty data to Ceph failed.
	ReasonFlushFailed = "FlushFailed"
	// ReasonDeleting: the volume is being torn down.
	ReasonDeleting = "Deleting"
	// ReasonUnknown: the data needed to decide is missing.
	ReasonUnknown = "Unknown"
)

// FlushRequestAnnotation asks the operator to write a write-back volume's
// dirty data to Ceph: set it to a new token (the CSI driver uses the
// snapshot's or clone's uuid); status.flushedRequest takes the token once
// every write acknowledged before it is in Ceph.
const FlushRequestAnnotation = "rackcache.io/flush-request"

// WriteThroughHoldAnnotation asks the operator to run a write-back volume
// write-through until the time it names: "<token>@<RFC 3339 time>". The
// CSI driver sets it with the flush request of a snapshot or clone (same
// token) and removes it once the RBD snapshot exists, so that writes
// acknowledged while the snapshot is taken reach Ceph in order and the
// snapshot is crash-consistent. A flush request with the hold's token is
// answered only once the dataplane runs the volume write-through; the
// volume goes back to write-back when the annotation goes or its time
// passes.
const WriteThroughHoldAnnotation = "rackcache.io/write-through-hold"

// Finalizers.
const (
	// CachePoolFinalizer holds a pool's deletion while volumes use it.
	CachePoolFinalizer = "rackcache.io/cachepool"
	// CachedVolumeFinalizer flushes and removes a volume from its dataplane.
	CachedVolumeFinalizer = "rackcache.io/cachedvolume"
)
