package cachedvolume

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/ceph"
)

// reconcileDelete removes the volume from its dataplane (flushing its
// dirty data to Ceph first), then drops the finalizer.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	vol := s.vol
	s.obs.Deleting = true
	if vol.Status.Server != "" {
		keepPlacement(s)
	}
	if !controllerutil.ContainsFinalizer(vol, rcv1.CachedVolumeFinalizer) {
		return ctrl.Result{}, nil
	}
	if vol.Status.Server == "" {
		return ctrl.Result{}, r.dropFinalizer(ctx, s)
	}
	pool := &rcv1.CachePool{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: vol.Spec.PoolName}, pool); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("get CachePool %s: %w", vol.Spec.PoolName, err)
		}
		return r.deleteFromLostServer(ctx, s, "its CachePool no longer exists")
	}
	s.pool = pool
	// A write-through mirror holds no dirty data: it goes as a former
	// server does. A write-back mirror holds every acknowledged write: it
	// goes only once the owner's teardown has put them in Ceph.
	wbMirror := vol.Status.Mirror != "" && writeBackMirror(vol, pool)
	if vol.Status.Mirror != "" && !wbMirror {
		forgetMirror(vol)
	}
	// Best effort: a former server that is still lost keeps its stale
	// objects (docs/operator.md), it does not hold the deletion up.
	r.cleanFormerServers(ctx, s)
	server := findServer(pool, vol.Status.Server)
	switch {
	case server == nil:
		return r.deleteFromLostServer(ctx, s, "the server is no longer one of the pool's servers")
	case !server.Ready:
		return r.deleteFromLostServer(ctx, s, "the pool reports the server not ready")
	}
	cluster := ""
	if backend, err := ceph.Resolve(ctx, r.Client, pool, ceph.Node); err == nil {
		cluster = ClusterName(pool.Name, backend.Fingerprint())
	}
	c, err := r.dataplaneClient(ctx, pool.Name, server)
	if err != nil {
		s.obs.DataplaneError = err.Error()
		return ctrl.Result{}, err
	}
	discard := !mayHoldDirtyData(vol.Status.WriteMode, EffectiveWriteMode(vol, pool)) || vol.Annotations[DiscardDirtyDataAnnotation] == "true"
	res, err := Teardown(ctx, c, vol.Name, cluster, &discard)
	if err != nil {
		if unreachable(err) {
			return r.deleteFromLostServer(ctx, s, "the server does not answer: "+err.Error())
		}
		s.obs.DataplaneError = fmt.Sprintf("cache server %s: %v", server.NodeName, err)
		return ctrl.Result{}, err
	}
	if f := res.Flush; f != nil {
		s.obs.Flushing, s.obs.FlushDirty = true, f.DirtyBytes
		vol.Status.Flush = flushStatus(f)
		if f.Error != nil {
			s.obs.FlushError = *f.Error
			s.obs.DeleteBlocked = "writing dirty data to Ceph failed, retrying; the volume stays until it succeeds: " + *f.Error
		}
		return r.flushRequeue(), nil
	}
	r.event(vol, corev1.EventTypeNormal, "Flushed",
		"dirty data written to Ceph and the volume removed from cache server %s", server.NodeName)
	if wbMirror {
		forgetMirror(vol)
		r.cleanFormerServers(ctx, s)
	}
	return ctrl.Result{}, r.dropFinalizer(ctx, s)
}

// deleteFromLostServer finishes deleting a volume whose server cannot be
// reached: nothing is lost for a volume without dirty data; a write-back
// volume keeps its finalizer (its dirty data is on that server) unless the
// discard annotation gives that data up.
func (r *Reconciler) deleteFromLostServer(ctx context.Context, s *scope, why string) (ctrl.Result, error) {
	vol := s.vol
	wanted := vol.Spec.WriteMode
	if s.pool != nil {
		wanted = EffectiveWriteMode(vol, s.pool)
	}
	if mayHoldDirtyData(vol.Status.WriteMode, wanted) && vol.Annotations[DiscardDirtyDataAnnotation] != "true" {
		s.obs.DeleteBlocked = fmt.Sprintf(
			"cache server %s holds this write-back volume's dirty data and cannot be reached (%s); deletion waits for it. "+
				"To give that data up, annotate the volume %s=\"true\"", vol.Status.Server, why, DiscardDirtyDataAnnotation)
		return r.statsRequeue(), nil
	}
	ctrl.LoggerFrom(ctx).Info("deleting a volume whose server is lost", "server", vol.Status.Server, "why", why)
	return ctrl.Result{}, r.dropFinalizer(ctx, s)
}

// forgetMirror makes the volume's mirror a former server.
func forgetMirror(vol *rcv1.CachedVolume) {
	rememberFormerServer(vol, vol.Status.Mirror)
	vol.Status.Mirror, vol.Status.MirrorCacheDevice = "", ""
}

func (r *Reconciler) dropFinalizer(ctx context.Context, s *scope) error {
	patch := client.MergeFromWithOptions(s.vol.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(s.vol, rcv1.CachedVolumeFinalizer)
	if err := r.Client.Patch(ctx, s.vol, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer: %w", err)
	}
	s.gone = true
	forgetVolumeMetrics(s.vol.Name)
	return nil
}
