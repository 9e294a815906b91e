package cachedvolume

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/ceph"
	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/controllers/hostkeys"
)

// A volume of a pool with replicas 2 has a mirror: a second server that
// exports the same subsystem (same NQN, same namespace UUID, ANA group 1)
// at its own portal, reporting the group inaccessible. Hosts connect to
// both; their native multipath sends I/O to the owner's optimized path
// only. When the owner is lost the mirror is fenced off from it and
// promoted (promote.go): its path turns optimized and the host's queued
// I/O goes there. The mirror serves nothing while it is mirror, so its
// cache holds no block the owner has since overwritten.

// defaultFailoverGrace is how long an owner with a ready mirror may be lost
// before the mirror is promoted, when the pool does not say.
const defaultFailoverGrace = 5 * time.Second

// anaGroup is the ANA group of every volume's namespace (one namespace per
// subsystem): each server's listener reports its own state for it.
const anaGroup = 1

// Controller ids: the NVMe range (1..0xFFEF) in cntlidSlots slices. Each
// server of a pool creates a volume's subsystem in the slice of its rank
// among the pool's servers, and a mirror whose slice is the owner's takes
// the next: the Linux host refuses a second path whose controller id it
// already has from the first ("duplicate cntlid").
const (
	cntlidSlots   = 16
	cntlidPerSlot = 4095
	maxCntlid     = 0xffef
)

// cntlidRange is the controller id range of slot.
func cntlidRange(slot int) (uint16, uint16) {
	first := 1 + slot*cntlidPerSlot
	return uint16(first), uint16(min(first+cntlidPerSlot-1, maxCntlid))
}

// cntlidSlot is node's slot: its rank among the pool's servers by name.
func cntlidSlot(pool *rcv1.CachePool, node string) int {
	rank := 0
	for _, s := range pool.Status.Servers {
		if s.NodeName < node {
			rank++
		}
	}
	return rank % cntlidSlots
}

// mirrorCntlidRange is the mirror's range: its own slot, unless the
// owner's subsystem (created earlier, maybe when the servers ranked
// otherwise) uses it.
func mirrorCntlidRange(pool *rcv1.CachePool, mirror string, ownerMin uint16) (uint16, uint16) {
	slot := cntlidSlot(pool, mirror)
	if lo, _ := cntlidRange(slot); lo == ownerMin {
		slot = (slot + 1) % cntlidSlots
	}
	return cntlidRange(slot)
}

// EffectiveReplicas is how many servers serve each volume of pool:
// spec.replicas, else 2 when the pool has at least two servers.
func EffectiveReplicas(pool *rcv1.CachePool) int {
	if pool.Spec.Replicas != nil {
		return int(*pool.Spec.Replicas)
	}
	if len(pool.Status.Servers) >= 2 {
		return 2
	}
	return 1
}

// FailoverGrace is the pool's failover grace.
func FailoverGrace(pool *rcv1.CachePool) time.Duration {
	if pool.Spec.FailoverGrace != nil && pool.Spec.FailoverGrace.Duration > 0 {
		return pool.Spec.FailoverGrace.Duration
	}
	return defaultFailoverGrace
}

// MirrorObservation is what a pass learned about the volume's mirror.
type MirrorObservation struct {
	Status  metav1.ConditionStatus
	Reason  string
	Message string
}

// mirrorWanted says whether vol gets a mirror in pool and, when not, why.
func mirrorWanted(vol *rcv1.CachedVolume, pool *rcv1.CachePool) (bool, *MirrorObservation) {
	if EffectiveReplicas(pool) < 2 {
		return false, &MirrorObservation{metav1.ConditionFalse, rcv1.ReasonNotMirrored,
			"the pool keeps one copy of each volume (spec.replicas 1, or fewer than two servers)"}
	}
	if writeBackMirror(vol, pool) && pool.Spec.DataPath.TLS {
		return false, &MirrorObservation{metav1.ConditionFalse, rcv1.ReasonWriteBackNotMirrored,
			"write-back data is mirrored over the servers' replication channel, which does not run TLS, and this pool's data path does; " +
				"a lost server keeps the volume Degraded until it returns"}
	}
	return true, nil
}

// writeBackMirror: the volume may hold dirty data, so its mirror is a
// write-back mirror (replication.go): it holds every acknowledged write.
func writeBackMirror(vol *rcv1.CachedVolume, pool *rcv1.CachePool) bool {
	return mayHoldDirtyData(vol.Status.WriteMode, EffectiveWriteMode(vol, pool))
}

// serveMirror makes the volume's mirror export it (placing one first when
// it has none), drops a mirror that is no longer wanted or was lost for
// longer than the failover grace, and adds the mirror's path to status.
// The owner is served already: nothing here fails the pass.
func (r *Reconciler) serveMirror(ctx context.Context, s *scope, backend *ceph.Backend, pairs map[string]hostkeys.Pair) {
	if !s.ownerANA {
		// Created before ANA reporting: one path only.
		s.obs.Mirror = &MirrorObservation{metav1.ConditionFalse, rcv1.ReasonNotMirrored,
			"the owner's subsystem was created without ANA reporting (before mirrors existed) and takes no second path; " +
				"a volume created now gets one"}
		return
	}
	vol, pool, st := s.vol, s.pool, &s.vol.Status
	// A step that must see Mirrored False stored first: this pass stores
	// it, keeps the mirror's path, and the next comes soon.
	storeUnmirrored := func(reason, msg string) {
		s.obs.Mirror = &MirrorObservation{metav1.ConditionFalse, reason, fmt.Sprintf(msg, st.Mirror)}
		s.requeueSoon = true
		keepMirrorPath(s)
	}
	if s.ownerUnmirrored {
		storeUnmirrored(rcv1.ReasonMirrorLost,
			"the owner does not forward its writes to mirror %s (its dataplane restarted?): its path stays inaccessible until this is stored, then the mirror's copy is made anew")
		return
	}
	if s.leavingWriteBack {
		storeUnmirrored(rcv1.ReasonLeavingWriteBack,
			"the volume leaves write-back (a snapshot's write-through hold or a change of mode): the owner stops forwarding to mirror %s once this is stored, and the mirror's copy is made anew")
		return
	}
	wanted, why := mirrorWanted(vol, pool)
	// serve decided it (the keys are there): recordApplied may have moved
	// status.writeMode since.
	wb := wanted && s.replicaKeys != nil
	server := findServer(pool, st.Mirror)
	// An owner forwarding to anything but this pass's mirror stops first
	// (it may hold answers for a broken one).
	keep := ""
	if wb && server != nil {
		keep = describeTarget(mirrorTarget(vol, server.ServingAddress(), poolPort(pool), *s.replicaKeys))
	}
	if !r.releaseReplica(ctx, s, keep) {
		keepMirrorPath(s)
		return
	}
	if !wanted {
		if st.Mirror != "" {
			r.dropMirror(s, why.Message)
		}
		s.obs.Mirror = why
		return
	}
	if st.Mirror == "" && !r.placeMirror(ctx, s) {
		return
	}
	server = findServer(pool, st.Mirror)
	lost := ""
	switch {
	case server == nil:
		lost = "it is no longer one of the pool's servers"
	case !server.Ready || (pool.Spec.DataPath.NamesDataPath() && server.DataAddress == ""):
		lost = "the pool reports it not ready"
	}
	var c *dataplane.Client
	if lost == "" {
		var err error
		if c, err = r.dataplaneClient(ctx, pool.Name, server); err != nil {
			lost = "it does not answer: " + err.Error()
		}
	}
	if lost == "" {
		d := DesiredState(vol, pool, backend, server.ServingAddress(), s.cacheSize)
		d.HostKeys = desiredHostKeys(vol.Name, pairs)
		d.ANAState = dataplane.ANAInaccessible
		// Its own cache of the volume from an earlier time (a former
		// owner back as mirror) missed the writes since: never promote it.
		d.FreshCache = true
		d.Subsystem.MinCntlid, d.Subsystem.MaxCntlid = mirrorCntlidRange(pool, st.Mirror, s.ownerMinCntlid)
		if wb {
			setWriteBackRoles(&d, vol, dataplane.RoleMirror, *s.replicaKeys)
		}
		res, err := Apply(ctx, c, d)
		if err == nil && !wb {
			err = writeThroughMirrorFresh(ctx, c, d)
		}
		switch {
		case err != nil && unreachable(err):
			lost = "it does not answer: " + err.Error()
		case err != nil:
			s.obs.Mirror = &MirrorObservation{metav1.ConditionFalse, rcv1.ReasonDataplaneError,
				fmt.Sprintf("mirror %s: %v", st.Mirror, err)}
			return
		default:
			if slices.ContainsFunc(res.Changed, func(c string) bool { return strings.HasPrefix(c, staleCacheDiscarded) }) {
				r.event(vol, corev1.EventTypeNormal, "StaleCacheDiscarded",
					"mirror %s held a cache of the volume from an earlier time, stale since; it was discarded and a new one made", st.Mirror)
			}
			st.MirrorCacheDevice = res.CacheDevice
			st.Paths = append(st.Paths, rcv1.VolumePath{Server: st.Mirror, Role: rcv1.RoleMirror,
				Address: server.ServingAddress(), Port: poolPort(pool), ANAState: string(dataplane.ANAInaccessible)})
			s.obs.Mirror = &MirrorObservation{metav1.ConditionTrue, rcv1.ReasonAsExpected, fmt.Sprintf(
				"cache server %s exports the volume's second path, inaccessible until it is promoted", st.Mirror)}
			if wb {
				s.obs.Mirror = r.linkMirror(ctx, s, c, d, res, mirrorTarget(vol, server.ServingAddress(), poolPort(pool), *s.replicaKeys))
			}
			return
		}
	}
	r.mirrorLost(ctx, s, lost)
}

// keepMirrorPath keeps the mirror's path in status on a pass that returns
// early: hosts following status.paths would drop their path to it.
func keepMirrorPath(s *scope) {
	st := &s.vol.Status
	if server := findServer(s.pool, st.Mirror); server != nil {
		st.Paths = append(st.Paths, rcv1.VolumePath{Server: st.Mirror, Role: rcv1.RoleMirror,
			Address: server.ServingAddress(), Port: poolPort(s.pool), ANAState: string(dataplane.ANAInaccessible)})
	}
}

// writeThroughMirrorFresh makes anew a write-through mirror's copy that a
// write-back mirror left (role mirror: the volume left write-back, and its
// clean blocks are stale from the first write after that).
func writeThroughMirrorFresh(ctx context.Context, c *dataplane.Client, d Desired) error {
	st, err := c.CachedBdevStats(ctx, d.Cached.Name)
	if err != nil {
		return fmt.Errorf("read the mirror's copy: %w", err)
	}
	if st.Role != dataplane.RoleMirror {
		return nil
	}
	return remakeMirrorCopy(ctx, c, d)
}

// mirrorLost reports a lost mirror and, once the failover grace has
// passed, gives it up: another is placed on the next pass.
func (r *Reconciler) mirrorLost(ctx context.Context, s *scope, why string) {
	st := &s.vol.Status
	msg := fmt.Sprintf("mirror %s is lost: %s", st.Mirror, why)
	s.obs.Mirror = &MirrorObservation{metav1.ConditionFalse, rcv1.ReasonMirrorLost, msg}
	since := r.now()
	if c := meta.FindStatusCondition(st.Conditions, rcv1.ConditionMirrored); c != nil && c.Reason == rcv1.ReasonMirrorLost {
		since = c.LastTransitionTime.Time
	}
	if r.now().Sub(since) < FailoverGrace(s.pool) {
		ctrl.LoggerFrom(ctx).Info("mirror lost, within the failover grace", "mirror", st.Mirror, "why", why)
		return
	}
	r.dropMirror(s, msg)
}

// dropMirror forgets the volume's mirror; its objects are removed by the
// former-server cleanup once it answers (it holds no dirty data).
func (r *Reconciler) dropMirror(s *scope, why string) {
	st := &s.vol.Status
	r.event(s.vol, corev1.EventTypeNormal, "MirrorRemoved", "mirror %s removed: %s", st.Mirror, why)
	rememberFormerServer(s.vol, st.Mirror)
	st.Mirror, st.MirrorCacheDevice = "", ""
}

// placeMirror chooses the volume's mirror: never its owner nor a former
// server, in the owner's rack when one there has room (as an owner is
// placed in the volume's rack), otherwise where the pool's rack rules
// allow. False when none has room.
func (r *Reconciler) placeMirror(ctx context.Context, s *scope) bool {
	vol, pool, st := s.vol, s.pool, &s.vol.Status
	alloc, err := r.allocation(ctx, pool.Name, vol.Name)
	if err != nil {
		s.obs.Mirror = &MirrorObservation{metav1.ConditionFalse, rcv1.ReasonDataplaneError, err.Error()}
		return false
	}
	// The owner's own cache counts against its server.
	alloc[st.Server] = append(alloc[st.Server], placedCache{Device: st.CacheDevice, Bytes: s.cacheSize})
	rack := st.Rack
	if rack == "" {
		rack = vol.Spec.Rack
	}
	req := PlacementRequest{Rack: rack, Need: s.cacheSize, AllowCrossRack: true,
		Exclude: append([]string{st.Server}, st.FormerServers...)}
	res, err := Place(candidates(pool, alloc), req, r.rng())
	if err != nil {
		s.obs.Mirror = &MirrorObservation{metav1.ConditionFalse, rcv1.ReasonNoCapacity, "no server for a mirror: " + err.Error()}
		return false
	}
	st.Mirror, st.MirrorCacheDevice = res.Server.Name, ""
	ctrl.LoggerFrom(ctx).Info("mirror placed", "mirror", res.Server.Name, "rack", res.Server.Rack, "owner", st.Server)
	r.event(vol, corev1.EventTypeNormal, "MirrorPlaced", "mirror placed on %s (rack %q)", res.Server.Name, res.Server.Rack)
	return true
}

// mirrorReady: the volume has a mirror that exported it on the last pass
// and the pool reports ready, so it can be promoted.
func mirrorReady(vol *rcv1.CachedVolume, pool *rcv1.CachePool) bool {
	if vol.Status.Mirror == "" || !meta.IsStatusConditionTrue(vol.Status.Conditions, rcv1.ConditionMirrored) {
		return false
	}
	server := findServer(pool, vol.Status.Mirror)
	return server != nil && server.Ready
}
