package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RBDImage names the Ceph RBD image a cached volume caches.
type RBDImage struct {
	// Pool is the Ceph pool holding the image.
	// +required
	// +kubebuilder:validation:MinLength=1
	Pool string `json:"pool"`
	// Image is the RBD image name.
	// +required
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
}

// CacheSize is how much cache a volume gets: a byte quantity (e.g. 10Gi) or
// a percentage of the volume's size from 1% to 100% (e.g. 25%).
// +kubebuilder:validation:XValidation:rule="self.matches('^([1-9][0-9]?|100)%$') || (isQuantity(self) && quantity(self).isGreaterThan(quantity('0')))",message="cacheSize must be a positive byte quantity such as 10Gi, or a percentage of the volume from 1% to 100% such as 25%"
// +kubebuilder:validation:MaxLength=32
type CacheSize string

// CachedVolumeSpec is the desired state of a CachedVolume.
// +kubebuilder:validation:XValidation:rule="!has(self.cacheSize) || self.cacheSize.endsWith('%') || !isQuantity(self.cacheSize) || quantity(self.cacheSize).compareTo(quantity(string(self.size))) <= 0",message="cacheSize must not exceed the volume's size; lower it or give a percentage"
type CachedVolumeSpec struct {
	// PoolName is the CachePool serving the volume; it cannot change.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="poolName is immutable; create a new CachedVolume to move a volume to another pool"
	PoolName string `json:"poolName"`
	// RBD is the Ceph image behind the volume; it cannot change.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="rbd (pool and image) is immutable; create a new CachedVolume for another image"
	RBD RBDImage `json:"rbd"`
	// Size is the volume's size (the RBD image's size). It can grow, not shrink.
	// +required
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="size must be a positive byte quantity such as 100Gi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity(string(oldSelf))) >= 0",message="size cannot shrink; volumes can only grow"
	Size resource.Quantity `json:"size"`
	// CacheSize is this volume's share of its server's cache.
	// +optional
	// +kubebuilder:default="10%"
	CacheSize CacheSize `json:"cacheSize,omitempty"`
	// Rack is the rack the volume is wanted in (the rack of the consuming
	// pod's node); empty for no preference.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Rack string `json:"rack,omitempty"`
	// WriteMode overrides the pool's write mode. Leaving WriteBack writes
	// every dirty block to Ceph first; the change is refused while the
	// volume cannot flush (status.phase Degraded or Failed).
	// +optional
	WriteMode WriteMode `json:"writeMode,omitempty"`
	// AllocationMode overrides the pool's allocation mode.
	// +optional
	AllocationMode AllocationMode `json:"allocationMode,omitempty"`
	// Policies override the pool's policies field by field.
	// +optional
	Policies CachePolicy `json:"policies,omitempty"`
	// AllowedHosts are the host NQNs that may connect; none may when empty.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:XValidation:rule="self.startsWith('nqn.') && size(self) <= 223",message="each allowed host must be an NVMe host NQN (starting with nqn., at most 223 bytes)"
	AllowedHosts []string `json:"allowedHosts,omitempty"`
	// HostKeysSecret names the Secret, in the operator's namespace, where
	// the operator keeps the allowed hosts' DH-HMAC-CHAP keys when the
	// pool authenticates hosts; "<name>-host-keys" when empty. The CSI
	// driver sets it to the name its StorageClass's node-stage secret
	// template gives, rackcache-keys-<PV name>.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="hostKeysSecret must be a Secret name (lowercase letters, digits, - and .)"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="hostKeysSecret cannot change"
	HostKeysSecret string `json:"hostKeysSecret,omitempty"`
}

// RotateHostKeysAnnotation on a CachedVolume asks for new host keys: each
// new value is one rotation.
const RotateHostKeysAnnotation = "rackcache.io/rotate-host-keys"

// CachedVolumePhase is a coarse summary of a volume's state.
// +kubebuilder:validation:Enum=Pending;Placing;Ready;Flushing;Degraded;Deleting;Failed
type CachedVolumePhase string

const (
	// VolumePending: not placed yet.
	VolumePending CachedVolumePhase = "Pending"
	// VolumePlacing: a server was chosen; the dataplane objects are being created.
	VolumePlacing CachedVolumePhase = "Placing"
	// VolumeReady: hosts can connect.
	VolumeReady CachedVolumePhase = "Ready"
	// VolumeFlushing: dirty data is being written to Ceph (write-mode change or deletion).
	VolumeFlushing CachedVolumePhase = "Flushing"
	// VolumeDegraded: the volume's server is lost or its cache failed.
	VolumeDegraded CachedVolumePhase = "Degraded"
	// VolumeDeleting: the finalizer is tearing the volume down.
	VolumeDeleting CachedVolumePhase = "Deleting"
	// VolumeFailed: the volume cannot be served; conditions say why.
	VolumeFailed CachedVolumePhase = "Failed"
)

// FlushStatus tracks a write-back flush (a write-mode change away from
// WriteBack, or deletion).
type FlushStatus struct {
	// InProgress is true while dirty data is being written to Ceph.
	InProgress bool `json:"inProgress"`
	// DirtyBytes left to write.
	// +optional
	DirtyBytes int64 `json:"dirtyBytes,omitempty"`
	// FlushedBytes written so far.
	// +optional
	FlushedBytes int64 `json:"flushedBytes,omitempty"`
	// Error of the last flush, empty when it succeeded.
	// +optional
	Error string `json:"error,omitempty"`
}

// VolumeStats are the key cache statistics read from the dataplane.
type VolumeStats struct {
	// HitRatio is the read hit ratio as a percentage, e.g. "93.5%".
	// +optional
	HitRatio string `json:"hitRatio,omitempty"`
	// Dirty is the amount of data not yet written to Ceph.
	// +optional
	Dirty *resource.Quantity `json:"dirty,omitempty"`
	// ReadBytes and WrittenBytes since the volume was (re)created on its server.
	// +optional
	ReadBytes int64 `json:"readBytes,omitempty"`
	// +optional
	WrittenBytes int64 `json:"writtenBytes,omitempty"`
	// DamagedDirtyBytes are write-back bytes that failed their checksum on
	// the cache device: hosts get a media error on them and they are never
	// written to Ceph (condition Degraded, reason DirtyDataDamaged).
	// +optional
	DamagedDirtyBytes int64 `json:"damagedDirtyBytes,omitempty"`
}

// PathRole is what a cache server is to a volume.
// +kubebuilder:validation:Enum=Owner;Mirror
type PathRole string

const (
	// RoleOwner serves the volume's I/O (ANA optimized).
	RoleOwner PathRole = "Owner"
	// RoleMirror exports the volume's subsystem without serving it (ANA
	// inaccessible) and is promoted when the owner is lost.
	RoleMirror PathRole = "Mirror"
)

// VolumePath is one server's NVMe/TCP portal for a volume.
type VolumePath struct {
	// Server is the cache server's node name.
	Server string `json:"server"`
	// Role is the server's role for the volume.
	Role PathRole `json:"role"`
	// Address and Port are the portal.
	Address string `json:"address"`
	Port    int32  `json:"port"`
	// ANAState is the state the portal reports: optimized or inaccessible.
	// +optional
	ANAState string `json:"anaState,omitempty"`
}

// CachedVolumeStatus is the observed state of a CachedVolume.
type CachedVolumeStatus struct {
	// Conditions: Ready, Placed, Degraded, Flushed.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the generation the last successful pass acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase summarises the state.
	// +optional
	Phase CachedVolumePhase `json:"phase,omitempty"`
	// Server is the node name of the cache server holding the volume.
	// +optional
	Server string `json:"server,omitempty"`
	// Rack is the server's rack.
	// +optional
	Rack string `json:"rack,omitempty"`
	// CacheDevice is the pool's cache device (its cache bdev, cache0 and
	// so on) holding the volume's cache on its server.
	// +optional
	CacheDevice string `json:"cacheDevice,omitempty"`
	// FormerServers are servers the volume was re-placed away from (they
	// were lost) that may still hold its objects: a returning server's
	// persisted configuration brings back the volume's subsystem and a
	// cache that is stale by then. The operator revokes every host there
	// and removes the objects once the server answers again.
	// +optional
	// +listType=set
	FormerServers []string `json:"formerServers,omitempty"`
	// CrossRack is true when the volume was placed outside spec.rack.
	// +optional
	CrossRack bool `json:"crossRack,omitempty"`
	// Mirror is the node name of the second cache server exporting the
	// volume (pools with replicas 2): its path is inaccessible to hosts
	// until the operator promotes it, after fencing the owner.
	// +optional
	Mirror string `json:"mirror,omitempty"`
	// MirrorCacheDevice is the mirror's cache device holding the volume.
	// +optional
	MirrorCacheDevice string `json:"mirrorCacheDevice,omitempty"`
	// Epoch counts the volume's changes of owner (0 before the first
	// placement); a promotion raises it.
	// +optional
	Epoch int64 `json:"epoch,omitempty"`
	// Paths are the NVMe/TCP portals exporting the volume, the owner's
	// first, with the ANA state each reports. Hosts connect to all of them
	// and their native multipath sends I/O where the state allows.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=2
	Paths []VolumePath `json:"paths,omitempty"`
	// OwnerCephClient is the Ceph client address (as `ceph osd blocklist`
	// takes it) of the owner's dataplane: what is blocklisted to fence it
	// before its mirror is promoted.
	// +optional
	OwnerCephClient string `json:"ownerCephClient,omitempty"`
	// Address and Port are the NVMe/TCP listener hosts connect to.
	// +optional
	Address string `json:"address,omitempty"`
	// +optional
	Port int32 `json:"port,omitempty"`
	// NQN is the volume's NVMe subsystem NQN.
	// +optional
	NQN string `json:"nqn,omitempty"`
	// WriteMode is the write mode the dataplane runs the volume with.
	// +optional
	WriteMode WriteMode `json:"writeMode,omitempty"`
	// CacheSize is the resolved cache size in bytes.
	// +optional
	CacheSize *resource.Quantity `json:"cacheSize,omitempty"`
	// Flush tracks the last or current flush.
	// +optional
	Flush *FlushStatus `json:"flush,omitempty"`
	// FlushedRequest is the last value of the rackcache.io/flush-request
	// annotation whose flush completed: every write acknowledged before
	// that annotation was set is in Ceph.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	FlushedRequest string `json:"flushedRequest,omitempty"`
	// WriteThroughHold is the token of the rackcache.io/write-through-hold
	// annotation the dataplane now serves: the write-back volume runs
	// write-through until the hold ends (writeMode still says WriteBack).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	WriteThroughHold string `json:"writeThroughHold,omitempty"`
	// Stats are key cache statistics.
	// +optional
	Stats VolumeStats `json:"stats,omitempty"`
}

// CachedVolume is an RBD image served through a cache server of a
// CachePool over NVMe/TCP. Cluster-scoped, like a PersistentVolume.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=cvol,categories=rackcache
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.spec.writeMode) || oldSelf.spec.writeMode != 'WriteBack' || (has(self.spec.writeMode) && self.spec.writeMode == 'WriteBack') || !has(self.status) || !has(self.status.phase) || !(self.status.phase in ['Degraded', 'Failed'])",message="writeMode cannot leave WriteBack while the volume is Degraded or Failed: its dirty data must be flushed to Ceph first and its server cannot flush; restore the server (or delete the volume) and retry"
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.poolName`
// +kubebuilder:printcolumn:name="Server",type=string,JSONPath=`.status.server`
// +kubebuilder:printcolumn:name="Mirror",type=string,JSONPath=`.status.mirror`,priority=1
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Size",type=string,JSONPath=`.spec.size`
// +kubebuilder:printcolumn:name="Cache",type=string,JSONPath=`.spec.cacheSize`
// +kubebuilder:printcolumn:name="Hit Ratio",type=string,JSONPath=`.status.stats.hitRatio`
// +kubebuilder:printcolumn:name="Dirty",type=string,JSONPath=`.status.stats.dirty`
// +kubebuilder:printcolumn:name="Write Mode",type=string,JSONPath=`.status.writeMode`,priority=1
// +kubebuilder:printcolumn:name="Rack",type=string,JSONPath=`.status.rack`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CachedVolume struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	// +required
	Spec CachedVolumeSpec `json:"spec"`
	// Status is the observed state.
	// +optional
	Status CachedVolumeStatus `json:"status,omitempty"`
}

// CachedVolumeList is a list of CachedVolumes.
//
// +kubebuilder:object:root=true
type CachedVolumeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CachedVolume `json:"items"`
}

func init() {
	SchemeBuilder.Register(&CachedVolume{}, &CachedVolumeList{})
}
