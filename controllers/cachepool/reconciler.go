// Package cachepool reconciles CachePools: the dataplane DaemonSet and its
// credentials, and each server's state read over JSON-RPC.
package cachepool

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/cachedvolume"
	"github.com/rackcache/rackcache/controllers/ceph"
	"github.com/rackcache/rackcache/controllers/servers"
)

// defaultStatusInterval applies when StatusInterval is zero.
const defaultStatusInterval = 30 * time.Second

// staleCacheRetry is how soon a pass is retried after creating an object
// the cache had not seen (AlreadyExists).
const staleCacheRetry = time.Second

// Reconciler reconciles CachePools.
type Reconciler struct {
	Client    client.Client
	Namespace string
	Connector *servers.Connector
	Recorder  record.EventRecorder
	// StatusInterval is how often servers are read again.
	StatusInterval time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Admission limits the pools' devices and images (DefaultAdmission
	// when nil).
	Admission *Admission
	// ServerAccess is how the dataplane pods check the operator's calls.
	ServerAccess ServerAccess

	// io keeps each server's previous I/O counters for its IOPS.
	io ioTracker
}

// +kubebuilder:rbac:groups=rackcache.io,resources=cachepools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=rackcache.io,resources=cachepools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=rackcache.io,resources=cachepools/finalizers,verbs=update
// +kubebuilder:rbac:groups=rackcache.io,resources=cachedvolumes,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,namespace=rackcache-system,resources=daemonsets,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",namespace=rackcache-system,resources=secrets;configmaps,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",namespace=rackcache-system,resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets;configmaps,verbs=get
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile does one pass over a CachePool: finalizer, credentials,
// ConfigMap and DaemonSet, then the status read from the servers; or, when
// the pool is being deleted, waits for its volumes to go.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pool := &rcv1.CachePool{}
	if err := r.Client.Get(ctx, req.NamespacedName, pool); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get CachePool %s: %w", req.Name, err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, pool)
	}
	if !controllerutil.ContainsFinalizer(pool, rcv1.CachePoolFinalizer) {
		// Before anything is made: a pool without it could go while
		// volumes still use it.
		patch := client.MergeFromWithOptions(pool.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(pool, rcv1.CachePoolFinalizer)
		if err := r.Client.Patch(ctx, pool, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer to CachePool %s: %w", pool.Name, err)
		}
	}
	return r.reconcileNormal(ctx, pool)
}

func (r *Reconciler) reconcileNormal(ctx context.Context, pool *rcv1.CachePool) (ctrl.Result, error) {
	admission := DefaultAdmission()
	if r.Admission != nil {
		admission = *r.Admission
	}
	notAllowed := admission.Check(pool)
	// One read of the Ceph backend per pass: the servers' keyring copy
	// and the status's Ceph error both come from it.
	backend, cephErr := ceph.Resolve(ctx, r.Client, pool, ceph.Node)
	var applyErr error
	if notAllowed == nil {
		applyErr = r.reconcileObjects(ctx, pool, backend)
	}
	o, observeErr := r.observe(ctx, pool, cephErr)
	if notAllowed != nil {
		// Nothing was changed; what runs (if anything) is the last
		// admitted spec.
		o.NotAllowed = notAllowed.Error()
	}
	o.Succeeded = applyErr == nil && observeErr == nil
	statusErr := r.writeStatus(ctx, pool, o)
	err := kerrors.NewAggregate([]error{applyErr, observeErr, statusErr})
	if err != nil && apierrors.IsAlreadyExists(applyErr) {
		return ctrl.Result{RequeueAfter: staleCacheRetry}, nil
	}
	return ctrl.Result{RequeueAfter: r.statusInterval()}, err
}

// reconcileObjects makes the pool's credentials, ConfigMap and DaemonSet
// what they should be.
// backend is nil while pool's Ceph backend cannot be resolved.
func (r *Reconciler) reconcileObjects(ctx context.Context, pool *rcv1.CachePool, backend *ceph.Backend) error {
	if err := r.reconcileCredentials(ctx, pool); err != nil {
		return err
	}
	if err := r.reconcileCephKeyring(ctx, pool, backend); err != nil {
		return err
	}
	config, err := renderDataplaneConfig(pool)
	if err != nil {
		return err
	}
	owner := client.FieldOwner(servers.ManagerName)
	if err := r.Client.Apply(ctx, desiredConfigMap(pool, r.Namespace, config), owner, client.ForceOwnership); err != nil {
		return fmt.Errorf("apply ConfigMap %s/%s: %w", r.Namespace, servers.ConfigMapName(pool.Name), err)
	}
	if err := r.Client.Apply(ctx, desiredDaemonSet(pool, r.Namespace, configHash(config), r.ServerAccess), owner, client.ForceOwnership); err != nil {
		return fmt.Errorf("apply DaemonSet %s/%s: %w", r.Namespace, servers.DaemonSetName(pool.Name), err)
	}
	return nil
}

// observe reads what the status is computed from: the Ceph backend, the
// DaemonSet, the servers and the volumes. A failed read of a server is part
// of the observation; a failed read of the API server is an error.
func (r *Reconciler) observe(ctx context.Context, pool *rcv1.CachePool, cephErr error) (*observation, error) {
	o := &observation{Generation: pool.Generation, Now: r.now()}
	var errs []error
	if cephErr != nil {
		o.CephError = cephErr.Error()
	}
	ds := &appsv1.DaemonSet{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: servers.DaemonSetName(pool.Name)}, ds)
	switch {
	case apierrors.IsNotFound(err):
		ds = nil
	case err != nil:
		errs = append(errs, fmt.Errorf("get DaemonSet %s/%s: %w", r.Namespace, servers.DaemonSetName(pool.Name), err))
		ds = nil
	}
	if ds != nil {
		o.DesiredScheduled = ds.Status.DesiredNumberScheduled
	}
	o.Rollout = rolloutMessage(ds)
	list, err := servers.List(ctx, r.Client, r.Namespace, pool)
	if err != nil {
		errs = append(errs, err)
		o.ServersUnknown = true
	}
	volumes, live, err := r.poolVolumes(ctx, pool.Name)
	if err != nil {
		errs = append(errs, err)
	}
	o.Volumes = volumes
	o.Readings = r.readServers(ctx, pool, list, live)
	return o, kerrors.NewAggregate(errs)
}

// poolVolumes counts the CachedVolumes naming pool and returns the names
// of every volume's dataplane objects (nil if the list failed). A list and
// a filter, not a field index: volumes are few per cluster, and the
// CachedVolume reconciler is free to index them its own way. Objects of
// every pool's volumes count as live: a volume may move between pools'
// servers only by being re-created, but a name is never dropped while any
// volume of that name exists.
func (r *Reconciler) poolVolumes(ctx context.Context, pool string) (int32, map[string]bool, error) {
	var list rcv1.CachedVolumeList
	if err := r.Client.List(ctx, &list); err != nil {
		return 0, nil, fmt.Errorf("list CachedVolumes: %w", err)
	}
	var n int32
	live := make(map[string]bool, 3*len(list.Items))
	for i := range list.Items {
		v := &list.Items[i]
		if v.Spec.PoolName == pool {
			n++
		}
		for _, o := range cachedvolume.ObjectNames(v.Name) {
			live[o] = true
		}
	}
	return n, live, nil
}

// writeStatus computes the pool's status from o, records Events for its
// transitions and the metrics, and patches the status when it changed. It
// is the only status writer.
func (r *Reconciler) writeStatus(ctx context.Context, pool *rcv1.CachePool, o *observation) error {
	before := pool.DeepCopy()
	pool.Status = computeStatus(&before.Status, o)
	for _, e := range transitionEvents(&before.Status, &pool.Status) {
		r.event(pool, e.Type, e.Reason, e.Message)
	}
	recordMetrics(pool.Name, &pool.Status)
	if equality.Semantic.DeepEqual(before.Status, pool.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, pool, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("patch status of CachePool %s: %w", pool.Name, err)
	}
	return nil
}

// reconcileDelete holds the pool while CachedVolumes name it; then it lets
// it go (its DaemonSet, ConfigMap and Secrets follow by garbage collection).
func (r *Reconciler) reconcileDelete(ctx context.Context, pool *rcv1.CachePool) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(pool, rcv1.CachePoolFinalizer) {
		return ctrl.Result{}, nil
	}
	_, cephErr := ceph.Resolve(ctx, r.Client, pool, ceph.Node)
	o, observeErr := r.observe(ctx, pool, cephErr)
	if observeErr != nil {
		return ctrl.Result{}, observeErr
	}
	if o.Volumes > 0 {
		o.Deleting = true
		o.Succeeded = true
		ctrl.LoggerFrom(ctx).Info("deletion held: CachedVolumes use the pool", "volumes", o.Volumes)
		if err := r.writeStatus(ctx, pool, o); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{RequeueAfter: r.statusInterval()}, nil
	}
	patch := client.MergeFromWithOptions(pool.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(pool, rcv1.CachePoolFinalizer)
	if err := r.Client.Patch(ctx, pool, patch); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("remove finalizer from CachePool %s: %w", pool.Name, err)
	}
	r.forget(pool.Name)
	ctrl.LoggerFrom(ctx).Info("CachePool released: no CachedVolume uses it")
	return ctrl.Result{}, nil
}

// forget drops what is kept in memory and in metrics for a pool that is gone.
func (r *Reconciler) forget(pool string) {
	r.io.forget(pool)
	forgetMetrics(pool)
}

func (r *Reconciler) event(pool *rcv1.CachePool, eventType, reason, message string) {
	if r.Recorder != nil {
		r.Recorder.Event(pool, eventType, reason, message)
	}
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reconciler) statusInterval() time.Duration {
	if r.StatusInterval > 0 {
		return r.StatusInterval
	}
	return defaultStatusInterval
}
