package cachedvolume

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/ceph"
	"github.com/rackcache/rackcache/controllers/dataplane"
)

// fenceExpiry is how long a fenced owner's Ceph client stays blocklisted:
// longer than any I/O it could still have in flight; a returning server's
// dataplane connects with a new client (a new address) when it restarts.
const fenceExpiry = time.Hour

// promote makes the volume's mirror its owner after the owner was lost:
// first the old owner is fenced (its Ceph client blocklisted through the
// mirror, so that nothing it still has in flight or still accepts reaches
// the image), then the roles change and the epoch rises, and the pass
// serves the new owner, whose path turns optimized. The old owner becomes
// a former server: once it answers again its subsystem is revoked and
// removed before it can serve the volume's stale cache.
func (r *Reconciler) promote(ctx context.Context, s *scope, d LostDecision) (ctrl.Result, error) {
	vol, pool, st := s.vol, s.pool, &s.vol.Status
	old, mirror := st.Server, findServer(pool, st.Mirror)
	if mirror == nil {
		return r.statsRequeue(), nil
	}
	// An owner that still answers (reported not ready by Kubernetes, its
	// pod or node) is demoted first: its path turns inaccessible, so it
	// acknowledges no more writes, and neither probe nor lease is needed.
	demoted := r.demoteOwner(ctx, s)
	// An owner whose portal still answers is alive and serving (its RPC
	// flooded or cut off alone): no failover. Should it be cut off from
	// the operator, its lease runs out and it fences itself meanwhile.
	if !demoted && st.Address != "" && r.probeDataPath(ctx, st.Address, st.Port) {
		if s.obs.Lost != nil {
			s.obs.Lost.Why += fmt.Sprintf("; its NVMe/TCP portal %s:%d still answers, so mirror %s is not promoted", st.Address, st.Port, mirror.NodeName)
		}
		ctrl.LoggerFrom(ctx).Info("lost owner's data path answers; not promoting", "lostOwner", old, "portal", st.Address)
		return ctrl.Result{RequeueAfter: probeTimeout}, nil
	}
	// A lost owner that still reaches its hosts (cut off from the
	// operator only) fences itself when its lease runs out: no promotion
	// before that, so that at most one server acknowledges writes.
	if r.Leases != nil && !demoted {
		if at := r.Leases.ExpiredAt(pool, old); r.now().Before(at) {
			ctrl.LoggerFrom(ctx).Info("waiting for the lost owner's lease to run out before promoting its mirror",
				"lostOwner", old, "until", at)
			return ctrl.Result{RequeueAfter: at.Sub(r.now())}, nil
		}
	}
	backend, err := ceph.Resolve(ctx, r.Client, pool, ceph.Node)
	if err != nil {
		s.obs.CephError = err.Error()
		return ctrl.Result{}, fmt.Errorf("resolve the Ceph backend of pool %s: %w", pool.Name, err)
	}
	c, err := r.dataplaneClient(ctx, pool.Name, mirror)
	if err == nil {
		// Blocklisting an address already blocklisted (a pass cut short
		// after it) is no error.
		err = c.BlocklistCephClient(ctx, ClusterName(pool.Name, backend.Fingerprint()), st.OwnerCephClient, fenceExpiry)
	}
	if err != nil {
		s.obs.DataplaneError = fmt.Sprintf("fence cache server %s through mirror %s before promoting it: %v", old, mirror.NodeName, err)
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("promoting the mirror", "lostOwner", old, "mirror", mirror.NodeName, "demoted", demoted,
		"fencedCephClient", st.OwnerCephClient, "why", d.Why, "epoch", st.Epoch+1)
	forgetVolumeMetrics(vol.Name)
	stored := vol.DeepCopy()
	rememberFormerServer(vol, old)
	st.Server, st.Rack, st.CacheDevice = mirror.NodeName, mirror.Rack, st.MirrorCacheDevice
	st.Mirror, st.MirrorCacheDevice, st.OwnerCephClient = "", "", ""
	st.Address, st.Port, st.CrossRack = "", 0, vol.Spec.Rack != "" && mirror.Rack != vol.Spec.Rack
	st.Flush, st.Stats = nil, rcv1.VolumeStats{}
	st.Epoch++
	s.obs.Placed, s.placedNow = true, true
	s.obs.PlacedReason = rcv1.ReasonPromoted
	s.obs.PlacedMessage = fmt.Sprintf("cache server %s was lost (%s); mirror %s was fenced off from it and promoted (epoch %d)",
		old, d.Why, mirror.NodeName, st.Epoch)
	r.event(vol, corev1.EventTypeWarning, "Promoted", "%s", s.obs.PlacedMessage)
	s.obs.Lost, s.obs.LostServer = nil, ""
	// Stored before the mirror is made owner: a pass that acted on a
	// promotion it then failed to store would serve the old owner again
	// beside the new one.
	if err := r.Client.Status().Patch(ctx, vol, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, fmt.Errorf("store the promotion of mirror %s before acting on it: %w", mirror.NodeName, err)
	}
	s.before = vol.DeepCopy()
	return r.serve(ctx, s, false)
}

// recordOwnerCephClient keeps the owner's Ceph client address in status,
// read while it answers: fencing needs it when it no longer does.
func recordOwnerCephClient(ctx context.Context, c *dataplane.Client, s *scope, cluster string) {
	info, err := c.RbdClusterInfo(ctx, cluster)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "read the owner's Ceph client address", "cluster", cluster)
		return
	}
	s.vol.Status.OwnerCephClient = info.ClientAddress
}

// demoteOwner makes the lost owner's path inaccessible when the owner
// still answers; true when it did.
func (r *Reconciler) demoteOwner(ctx context.Context, s *scope) bool {
	st := &s.vol.Status
	server := findServer(s.pool, st.Server)
	if server == nil || st.Address == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	c, err := r.dataplaneClient(ctx, s.pool.Name, server)
	if err != nil {
		return false
	}
	listener := dataplane.ListenAddress{TrType: "TCP", AdrFam: addressFamily(st.Address), TrAddr: st.Address, TrSvcID: strconv.Itoa(int(st.Port))}
	if err := c.SetANAState(ctx, SubsystemNQN(s.vol.Name), listener, dataplane.ANAInaccessible, anaGroup); err != nil {
		return false
	}
	ctrl.LoggerFrom(ctx).Info("lost owner still answers: its path is now inaccessible", "owner", st.Server)
	return true
}
