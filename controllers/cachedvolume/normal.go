package cachedvolume

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/ceph"
	"github.com/rackcache/rackcache/controllers/dataplane"
)

// reconcileNormal places the volume if it has no server, checks that
// server, and makes its dataplane serve the volume.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	vol := s.vol
	pool := &rcv1.CachePool{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: vol.Spec.PoolName}, pool); err != nil {
		if apierrors.IsNotFound(err) {
			s.obs.PoolMissing = true
			// The pool's creation wakes the volume through the pool watch.
			return r.statsRequeue(), nil
		}
		return ctrl.Result{}, fmt.Errorf("get CachePool %s: %w", vol.Spec.PoolName, err)
	}
	s.pool = pool
	size, err := ResolveCacheSize(&vol.Spec)
	if err != nil {
		s.obs.DataplaneError = err.Error()
		return ctrl.Result{}, err
	}
	s.cacheSize = size
	vol.Status.CacheSize = resource.NewQuantity(size, resource.BinarySI)

	if vol.Status.Server == "" {
		// The cache may lag a placement this reconciler wrote a moment
		// ago: placing again would put the volume on a second server.
		fresh := &rcv1.CachedVolume{}
		if err := r.apiReader().Get(ctx, client.ObjectKeyFromObject(vol), fresh); err != nil {
			return ctrl.Result{}, fmt.Errorf("read CachedVolume %s before placing it: %w", vol.Name, err)
		}
		if fresh.ResourceVersion != vol.ResourceVersion {
			s.stale = true
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		if !r.place(ctx, s, "", false) {
			return r.statsRequeue(), nil
		}
	} else {
		keepPlacement(s)
	}
	return r.serve(ctx, s, true)
}

// keepPlacement carries an earlier pass's placement into this one.
func keepPlacement(s *scope) {
	s.obs.Placed = true
	if c := meta.FindStatusCondition(s.vol.Status.Conditions, rcv1.ConditionPlaced); c != nil && c.Status == metav1.ConditionTrue {
		s.obs.PlacedReason, s.obs.PlacedMessage = c.Reason, c.Message
		return
	}
	s.obs.PlacedReason = rcv1.ReasonPlacedInRack
	s.obs.PlacedMessage = "placed on " + s.vol.Status.Server
}

// serve makes the volume's server serve it, or applies the lost-server
// rule when the server is gone, not ready or does not answer.
// mayReplace is false after a re-placement in this pass (one move a pass).
func (r *Reconciler) serve(ctx context.Context, s *scope, mayReplace bool) (ctrl.Result, error) {
	vol, pool := s.vol, s.pool
	if r.cleanFormerServers(ctx, s) {
		// Placed back on a server whose stale objects are not gone yet.
		s.obs.DataplaneError = fmt.Sprintf("cache server %s still holds this volume's objects from before it was lost; removing them first", vol.Status.Server)
		return r.statsRequeue(), nil
	}
	server := findServer(pool, vol.Status.Server)
	in := LostInput{
		Listed: server != nil,
		// A pool that names a data path is served only at the address
		// the server found for it.
		Ready: server != nil && server.Ready &&
			(!pool.Spec.DataPath.NamesDataPath() || server.DataAddress != ""),
		MayHoldDirtyData: mayHoldDirtyData(vol.Status.WriteMode, EffectiveWriteMode(vol, pool)),
		LostSince:        lostSince(vol),
		Now:              r.now(),
		Grace:            r.ServerLostGrace,
		// Without the owner's Ceph client address it cannot be fenced:
		// the mirror waits as long as a re-placement would.
		Promotable:    mirrorReady(vol, pool) && vol.Status.OwnerCephClient != "",
		FailoverGrace: FailoverGrace(pool),
	}
	if !in.Listed || !in.Ready {
		return r.lost(ctx, s, DecideLost(in), mayReplace)
	}
	c, dialErr := r.dataplaneClient(ctx, pool.Name, server)
	// Revocation comes first and needs nothing else: a host removed from
	// allowedHosts loses its access (and live connections) even while
	// Ceph cannot be resolved or another step of the apply fails.
	if dialErr == nil {
		if err := RevokeHosts(ctx, c, SubsystemNQN(vol.Name), vol.Spec.AllowedHosts); err != nil {
			if unreachable(err) {
				in.RPCError = err.Error()
				return r.lost(ctx, s, DecideLost(in), mayReplace)
			}
			s.obs.DataplaneError = fmt.Sprintf("cache server %s: %v", server.NodeName, err)
			return ctrl.Result{}, err
		}
	}
	backend, err := ceph.Resolve(ctx, r.Client, pool, ceph.Node)
	if err != nil {
		s.obs.CephError = err.Error()
		return ctrl.Result{}, fmt.Errorf("resolve the Ceph backend of pool %s: %w", pool.Name, err)
	}
	if dialErr != nil {
		s.obs.DataplaneError = dialErr.Error()
		return ctrl.Result{}, dialErr
	}
	pairs, err := r.ensureHostKeys(ctx, vol, pool)
	if err != nil {
		s.obs.DataplaneError = err.Error()
		return ctrl.Result{}, err
	}
	desired := DesiredState(vol, pool, backend, server.ServingAddress(), s.cacheSize)
	desired.HostKeys = desiredHostKeys(vol.Name, pairs)
	desired.ANAState = dataplane.ANAOptimized
	// The owner's copy as it runs before this pass applies anything (nil:
	// none, or not readable): read once for the mirror checks below.
	var prior *dataplane.CacheStats
	if wanted, _ := mirrorWanted(vol, pool); wanted && writeBackMirror(vol, pool) {
		keys, err := r.ensureReplicationKeys(ctx, vol)
		if err != nil {
			s.obs.DataplaneError = err.Error()
			return ctrl.Result{}, err
		}
		s.replicaKeys = &keys
		setWriteBackRoles(&desired, vol, dataplane.RoleOwner, keys)
		if vol.Status.Mirror != "" {
			if st, err := c.CachedBdevStats(ctx, desired.Cached.Name); err == nil {
				prior = st
			}
		}
		if vol.Status.Mirror != "" && !ownerForwards(prior) {
			if mirroredStored(vol) {
				// A restarted owner no longer forwards (the connection is
				// not saved), while a promotion would still count on the
				// mirror: its path stays inaccessible until Mirrored False
				// is stored.
				desired.ANAState = dataplane.ANAInaccessible
				s.ownerUnmirrored = true
			} else if !r.storedFresh(ctx, s) {
				// The cache may lag a pass that stored Mirrored True.
				return r.flushRequeue(), nil
			}
		}
	}
	desired.Subsystem.MinCntlid, desired.Subsystem.MaxCntlid = cntlidRange(cntlidSlot(pool, server.NodeName))
	hold := applyHold(&desired, vol, time.Now())
	if s.replicaKeys != nil && vol.Status.Mirror != "" && desired.Cached.WriteMode != dataplane.WriteBack && ownerMirrorsWriteBack(prior) {
		// Leaving write-back (a snapshot's hold, a change of mode), the
		// owner stops forwarding and marks its mirror's copy clean, stale
		// from the next write. While Mirrored True is stored a promotion
		// would count on that copy: the mode changes once False is.
		if mirroredStored(vol) {
			desired.Cached.WriteMode = dataplane.WriteBack
			s.leavingWriteBack = true
		} else if !r.storedFresh(ctx, s) {
			return r.flushRequeue(), nil
		}
	}
	// Served here before (status.address is cleared with the placement) in
	// a mode that may leave dirty data: its cache must be re-attached,
	// never replaced by a fresh one on another device.
	desired.MustLoad = !s.placedNow && vol.Status.Address != "" &&
		mayHoldDirtyData(vol.Status.WriteMode, EffectiveWriteMode(vol, pool))
	// A promoted write-back mirror holds every acknowledged write: its
	// copy is re-attached, never replaced by a fresh one.
	if s.obs.PlacedReason == rcv1.ReasonPromoted && s.placedNow && s.replicaKeys != nil {
		desired.MustLoad = true
	}
	applied, err := Apply(ctx, c, desired)
	if err != nil {
		if unreachable(err) {
			in.RPCError = err.Error()
			return r.lost(ctx, s, DecideLost(in), mayReplace)
		}
		s.obs.DataplaneError = fmt.Sprintf("cache server %s: %v", server.NodeName, err)
		if dataplane.IsCorrupt(err) {
			s.obs.CacheDamaged = fmt.Sprintf("cache server %s: %v", server.NodeName, err)
		}
		return ctrl.Result{}, err
	}
	if applied.Flushing == nil {
		// A flush the CSI driver asked for runs and reports like any other.
		if applied.Flushing, err = r.serveFlushRequest(ctx, s, c, desired, hold, applied.WriteMode); err != nil {
			s.obs.DataplaneError = fmt.Sprintf("cache server %s: %v", server.NodeName, err)
			return ctrl.Result{}, err
		}
	}
	s.ownerANA, s.ownerMinCntlid, s.ownerClient = applied.ANAReporting, applied.MinCntlid, c
	r.recordApplied(ctx, s, c, server, desired, applied, hold)
	recordOwnerCephClient(ctx, c, s, desired.Cluster.Name)
	r.serveMirror(ctx, s, backend, pairs)
	if applied.Flushing != nil || s.requeueSoon {
		return r.flushRequeue(), nil
	}
	if s.replicaKeys != nil {
		// A broken mirror holds the owner's answers until a pass notices:
		// within the failover grace, not the stats interval.
		return ctrl.Result{RequeueAfter: min(r.statsRequeue().RequeueAfter, FailoverGrace(pool))}, nil
	}
	return r.statsRequeue(), nil
}

// serveFlushRequest answers the flush-request annotation (set by the CSI
// driver before a snapshot or clone): it flushes the volume's dirty data
// and, once a flush status read after the request shows none left, records
// the request as done in status.flushedRequest. Returns the flush's status
// while it runs.
func (r *Reconciler) serveFlushRequest(ctx context.Context, s *scope, c *dataplane.Client, d Desired, hold, running string) (*dataplane.FlushStatus, error) {
	vol := s.vol
	token := vol.Annotations[rcv1.FlushRequestAnnotation]
	if token == "" || token == vol.Status.FlushedRequest {
		return nil, nil
	}
	// A request under its own hold is done once the volume runs
	// write-through (the switch flushed everything first).
	if hold == token && running != dataplane.WriteThrough {
		return nil, nil
	}
	if vol.Status.WriteMode == rcv1.WriteBack {
		st, err := startOrPollFlush(ctx, c, d.Cached.Name)
		if err != nil {
			return nil, err
		}
		if st.InProgress || st.DirtyBytes > 0 {
			return st, nil
		}
	}
	vol.Status.FlushedRequest = token
	ctrl.LoggerFrom(ctx).Info("flush request done", "request", token)
	return nil, nil
}

// unreachable: the call did not get an answer from the dataplane because
// the transport failed (dial, TLS, reset, timeout, connection cut mid-answer).
// Everything else is not a lost server: a refusal (*RPCError) means it is
// alive, and local failures (no device with room, a decode error, an HTTP
// status such as 401) would never heal by re-placing the volume.
func unreachable(err error) bool {
	var rpcErr *dataplane.RPCError
	if errors.As(err, &rpcErr) {
		return false
	}
	var netErr net.Error
	var urlErr *url.Error
	return errors.As(err, &netErr) || errors.As(err, &urlErr) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// lostSince is when the volume's Ready condition turned False for a lost
// server (zero when it has not).
func lostSince(vol *rcv1.CachedVolume) time.Time {
	c := meta.FindStatusCondition(vol.Status.Conditions, rcv1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != rcv1.ReasonServerLost {
		return time.Time{}
	}
	return c.LastTransitionTime.Time
}

// lost acts on the lost-server decision.
func (r *Reconciler) lost(ctx context.Context, s *scope, d LostDecision, mayReplace bool) (ctrl.Result, error) {
	vol := s.vol
	lostServer := vol.Status.Server
	s.obs.Lost, s.obs.LostServer = &d, lostServer
	ctrl.LoggerFrom(ctx).Info("cache server lost", "server", lostServer, "why", d.Why, "action", d.Action)
	switch d.Action {
	case LostWaiting:
		return ctrl.Result{RequeueAfter: min(d.RequeueAfter, r.statsRequeue().RequeueAfter)}, nil
	case LostDegrade:
		if !meta.IsStatusConditionTrue(vol.Status.Conditions, rcv1.ConditionDegraded) ||
			meta.FindStatusCondition(vol.Status.Conditions, rcv1.ConditionDegraded).Reason != rcv1.ReasonDirtyDataOnLostServer {
			r.event(vol, corev1.EventTypeWarning, "Degraded",
				"write-back volume's dirty data is on lost cache server %s (%s); not re-placed", lostServer, d.Why)
		}
		// Looked at again to notice the server's return.
		return r.statsRequeue(), nil
	case LostPromote:
		if !mayReplace {
			return r.statsRequeue(), nil
		}
		return r.promote(ctx, s, d)
	case LostReplace:
		if !mayReplace {
			return r.statsRequeue(), nil
		}
		forgetVolumeMetrics(vol.Name)
		rememberFormerServer(vol, lostServer)
		clearPlacement(vol)
		s.obs.Placed = false
		if !r.place(ctx, s, lostServer, true) {
			return r.statsRequeue(), nil
		}
		r.event(vol, corev1.EventTypeWarning, "Replaced",
			"cache server %s was lost (%s); re-placed on %s with a cold cache", lostServer, d.Why, vol.Status.Server)
		s.obs.Lost, s.obs.LostServer = nil, ""
		return r.serve(ctx, s, false)
	}
	return ctrl.Result{}, nil
}

// clearPlacement forgets where the volume is served. status.writeMode stays:
// the mode is taken from the pool at creation, and a re-placed volume keeps it.
func clearPlacement(vol *rcv1.CachedVolume) {
	st := &vol.Status
	st.Server, st.Rack, st.CrossRack, st.Address, st.Port, st.CacheDevice = "", "", false, "", 0, ""
	st.Flush = nil
	st.Stats = rcv1.VolumeStats{}
}

func findServer(pool *rcv1.CachePool, name string) *rcv1.ServerStatus {
	for i := range pool.Status.Servers {
		if pool.Status.Servers[i].NodeName == name {
			return &pool.Status.Servers[i]
		}
	}
	return nil
}

// recordApplied writes what the dataplane now holds into status, events
// and metrics.
func (r *Reconciler) recordApplied(ctx context.Context, s *scope, c *dataplane.Client, server *rcv1.ServerStatus, d Desired, res ApplyResult, hold string) {
	vol := s.vol
	st := &vol.Status
	wasServed := !s.placedNow && (meta.IsStatusConditionTrue(st.Conditions, rcv1.ConditionReady) ||
		st.Phase == rcv1.VolumeReady || st.Phase == rcv1.VolumeFlushing || st.Phase == rcv1.VolumeDegraded)
	if len(res.Created) > 0 && wasServed {
		r.event(vol, corev1.EventTypeNormal, "Recovered",
			"re-created %v on cache server %s (cache re-attached: %v)", res.Created, server.NodeName, res.Loaded)
	}
	st.Rack, st.Address, st.Port, st.NQN = server.Rack, server.ServingAddress(), poolPort(s.pool), d.Subsystem.NQN
	st.Paths = []rcv1.VolumePath{{Server: server.NodeName, Role: rcv1.RoleOwner, Address: st.Address, Port: st.Port, ANAState: string(res.ANAState)}}
	st.WriteMode = APIWriteMode(res.WriteMode)
	st.WriteThroughHold = ""
	if hold != "" && res.WriteMode == dataplane.WriteThrough {
		// Held write-through: the volume's own mode is still write-back
		// (EffectiveWriteMode reads it back from here).
		st.WriteMode, st.WriteThroughHold = rcv1.WriteBack, hold
	}
	st.CacheDevice = res.CacheDevice
	s.obs.Applied = true
	s.obs.CacheDegraded = res.Degraded
	if res.Degraded && !meta.IsStatusConditionTrue(st.Conditions, rcv1.ConditionDegraded) {
		r.event(vol, corev1.EventTypeWarning, "Degraded", "the cache device of cache server %s failed; the volume is served from Ceph", server.NodeName)
	}
	wasFlushing := st.Flush != nil && st.Flush.InProgress
	if f := res.Flushing; f != nil {
		s.obs.Flushing, s.obs.FlushDirty = true, f.DirtyBytes
		st.Flush = flushStatus(f)
		if f.Error != nil {
			s.obs.FlushError = *f.Error
		}
	} else if wasFlushing {
		st.Flush = &rcv1.FlushStatus{InProgress: false, FlushedBytes: st.Flush.FlushedBytes}
		r.event(vol, corev1.EventTypeNormal, "Flushed", "dirty data written to Ceph; write mode %s", st.WriteMode)
	}
	stats, err := c.CachedBdevStats(ctx, d.Cached.Name)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "read cached volume statistics", "server", server.NodeName)
		return
	}
	s.ownerStats = stats
	s.obs.DamagedDirtyBytes, s.obs.CacheDevice = stats.DamagedBytes, res.CacheDevice
	if stats.DamagedBytes > 0 && st.Stats.DamagedDirtyBytes == 0 {
		r.event(vol, corev1.EventTypeWarning, "DirtyDataDamaged",
			"%d bytes of write-back data failed their checksum on cache device %s of cache server %s", stats.DamagedBytes, res.CacheDevice, server.NodeName)
	}
	dirty := resource.NewQuantity(int64(stats.DirtyBytes), resource.BinarySI)
	st.Stats = rcv1.VolumeStats{
		HitRatio:     fmt.Sprintf("%.1f%%", stats.HitRatio.Read*100),
		Dirty:        dirty,
		ReadBytes:    int64(stats.Blocks.HostRead),
		WrittenBytes: int64(stats.Blocks.HostWrite),

		DamagedDirtyBytes: int64(stats.DamagedBytes),
	}
	recordVolumeMetrics(vol.Name, s.pool.Name, server.NodeName, volumeMetrics{
		HitRatio:     stats.HitRatio.Read,
		ReadBytes:    stats.Blocks.HostRead,
		WrittenBytes: stats.Blocks.HostWrite,
		DirtyBytes:   stats.DirtyBytes,
		CacheSize:    s.cacheSize,
	})
}

func flushStatus(f *dataplane.FlushStatus) *rcv1.FlushStatus {
	out := &rcv1.FlushStatus{InProgress: f.InProgress, DirtyBytes: int64(f.DirtyBytes), FlushedBytes: int64(f.FlushedBytes)}
	if f.Error != nil {
		out.Error = *f.Error
	}
	return out
}

func poolPort(pool *rcv1.CachePool) int32 {
	if pool.Spec.Port == 0 {
		return 4420
	}
	return pool.Spec.Port
}
