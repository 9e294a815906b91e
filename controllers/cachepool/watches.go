package cachepool

import (
	"context"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/servers"
)

// SetupWithManager registers the reconciler: a pass runs when the pool,
// anything it owns, one of its dataplane pods, a Node or one of its
// CachedVolumes changes, and every StatusInterval. The Ceph backend's
// ConfigMap and Secrets are read on every pass instead of watched (they
// live in other namespaces and are not the operator's).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&rcv1.CachePool{}, builder.WithPredicates(poolChanged)).
		Named("cachepool").
		Owns(&appsv1.DaemonSet{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Secret{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.poolOfPod)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.allPools), builder.WithPredicates(nodeChanged)).
		Watches(&rcv1.CachedVolume{}, handler.EnqueueRequestsFromMapFunc(poolOfVolume)).
		Complete(r)
}

// poolOfPod maps a dataplane pod to its pool.
func (r *Reconciler) poolOfPod(_ context.Context, o client.Object) []reconcile.Request {
	labels := o.GetLabels()
	if o.GetNamespace() != r.Namespace || labels[servers.LabelName] != servers.AppName || labels[servers.LabelPool] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: labels[servers.LabelPool]}}}
}

// allPools maps a Node to every pool: its labels decide which pools run a
// server there, and its readiness and rack label show in their status.
func (r *Reconciler) allPools(ctx context.Context, _ client.Object) []reconcile.Request {
	var pools rcv1.CachePoolList
	if err := r.Client.List(ctx, &pools); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list CachePools for a Node change")
		return nil
	}
	out := make([]reconcile.Request, 0, len(pools.Items))
	for i := range pools.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: pools.Items[i].Name}})
	}
	return out
}

// poolOfVolume maps a CachedVolume to the pool it names.
func poolOfVolume(_ context.Context, o client.Object) []reconcile.Request {
	v, ok := o.(*rcv1.CachedVolume)
	if !ok || v.Spec.PoolName == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: v.Spec.PoolName}}}
}

// poolChanged passes pool updates other than its status: the pass writes
// the status (IOPS change on every read), and waking itself on that would
// read the servers in a loop.
var poolChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		before, after := e.ObjectOld, e.ObjectNew
		return before.GetGeneration() != after.GetGeneration() ||
			!before.GetDeletionTimestamp().Equal(after.GetDeletionTimestamp()) ||
			!slices.Equal(before.GetFinalizers(), after.GetFinalizers()) ||
			!equality.Semantic.DeepEqual(before.GetLabels(), after.GetLabels()) ||
			!equality.Semantic.DeepEqual(before.GetAnnotations(), after.GetAnnotations())
	},
}

// nodeChanged passes Node updates that matter to pools (labels, which
// select servers and name racks, and readiness), not the periodic status
// heartbeats.
var nodeChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		before, ok1 := e.ObjectOld.(*corev1.Node)
		after, ok2 := e.ObjectNew.(*corev1.Node)
		if !ok1 || !ok2 {
			return true
		}
		return !equality.Semantic.DeepEqual(before.Labels, after.Labels) || nodeReady(before) != nodeReady(after)
	},
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
