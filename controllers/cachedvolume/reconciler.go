// Package cachedvolume reconciles CachedVolumes: placement on a cache
// server of the volume's pool, the volume's objects on that server's
// dataplane, lost servers, statistics, and teardown.
package cachedvolume

import (
	"context"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/controllers/servers"
)

// DiscardDirtyDataAnnotation, set to "true" on a write-back CachedVolume
// whose cache server is lost, lets its deletion finish without flushing:
// the dirty data on that server is given up.
const DiscardDirtyDataAnnotation = "rackcache.io/discard-dirty-data"

// flushPollInterval is how often a running flush is polled.
const flushPollInterval = 2 * time.Second

// Reconciler reconciles CachedVolumes.
type Reconciler struct {
	Client    client.Client
	Namespace string
	Connector *servers.Connector
	Recorder  record.EventRecorder
	// ServerLostGrace is how long a server may be unreachable before its
	// write-through and write-around volumes are re-placed.
	ServerLostGrace time.Duration
	// StatsInterval is how often a volume's statistics are read again.
	StatsInterval time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// APIReader reads past the cache where a stale read could place a
	// volume twice or overcommit a server: the volume itself and the other
	// volumes' allocation, at placement only (Client when nil).
	APIReader client.Reader
	// Rand drives placement's sampling (seeded from the clock when nil).
	Rand *rand.Rand
	// Leases, when set, says when a server's lease has surely run out: a
	// lost owner's mirror is promoted no earlier (nil: no leases run).
	Leases interface {
		ExpiredAt(pool *rcv1.CachePool, node string) time.Time
	}
	// LeaseEvents, when set, names pools whose servers did not answer a
	// lease renewal: their volumes are reconciled at once.
	LeaseEvents <-chan event.GenericEvent
	// ProbeDataPath says whether a server's NVMe/TCP portal answers
	// (dataPathAnswers when nil; tests cut one off).
	ProbeDataPath func(ctx context.Context, address string, port int32) bool
	// Dial makes the client of a server (Connector.Client when nil; tests
	// reach a real dataplane on its Unix socket).
	Dial func(ctx context.Context, pool, node, address string) (*dataplane.Client, error)
}

func (r *Reconciler) dataplaneClient(ctx context.Context, pool string, server *rcv1.ServerStatus) (*dataplane.Client, error) {
	if r.Dial != nil {
		return r.Dial(ctx, pool, server.NodeName, server.Address)
	}
	return r.Connector.Client(ctx, pool, server.NodeName, server.Address)
}

// scope is one pass over one volume.
type scope struct {
	vol  *rcv1.CachedVolume
	pool *rcv1.CachePool
	// cacheSize is the resolved cache size in bytes.
	cacheSize int64
	obs       Observation
	// ownerANA and ownerMinCntlid describe the owner's subsystem as the
	// pass found or made it: whether it reports ANA (takes a mirror) and
	// where its controller ids start (the mirror's must not).
	ownerANA       bool
	ownerMinCntlid uint16
	// placedNow: the volume got its server in this pass (its objects are
	// new there, not a recovery).
	placedNow bool
	// before is the stored volume the pass's status patch applies to.
	before *rcv1.CachedVolume
	// ownerClient is the owner's dataplane once the pass applied it;
	// ownerStats its cached bdev's statistics as recordApplied read them;
	// ownerReplica its mirror connection as last read (replication.go).
	ownerClient  *dataplane.Client
	ownerStats   *dataplane.CacheStats
	ownerReplica *dataplane.ReplicaStats
	ownerDirty   uint64
	// ownerUnmirrored: a write-back owner found not forwarding while
	// Mirrored True is stored; it serves nothing this pass.
	ownerUnmirrored bool
	// replicaKeys are the replication channel's keys of a write-back
	// volume with a mirror wanted (nil otherwise).
	replicaKeys *HostKeys
	// leavingWriteBack: the owner stays write-back this pass, which
	// stores Mirrored False before it stops forwarding to its mirror.
	leavingWriteBack bool
	// requeueSoon: a step waits for something that takes seconds (a
	// mirror syncing, a stored condition before the owner goes on alone).
	requeueSoon bool
	// gone: the finalizer was removed, the object may no longer exist.
	gone bool
	// stale: the cache served an older volume than the apiserver holds;
	// the pass stops and writes nothing (the newer version wakes it).
	stale bool
}

// +kubebuilder:rbac:groups=rackcache.io,resources=cachedvolumes,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=rackcache.io,resources=cachedvolumes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=rackcache.io,resources=cachedvolumes/finalizers,verbs=update
// +kubebuilder:rbac:groups=rackcache.io,resources=cachepools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets;configmaps,verbs=get
// +kubebuilder:rbac:groups="",namespace=rackcache-system,resources=secrets;configmaps;pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile does one pass over a CachedVolume: the finalizer, then either
// placement and the dataplane's objects, or teardown; status is derived
// once at the end and written by one patch.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, reterr error) {
	vol := &rcv1.CachedVolume{}
	if err := r.Client.Get(ctx, req.NamespacedName, vol); err != nil {
		if apierrors.IsNotFound(err) {
			forgetVolumeMetrics(req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if vol.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(vol, rcv1.CachedVolumeFinalizer) {
		patch := client.MergeFromWithOptions(vol.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(vol, rcv1.CachedVolumeFinalizer)
		// The update wakes the next pass.
		return ctrl.Result{}, r.Client.Patch(ctx, vol, patch)
	}

	s := &scope{vol: vol, before: vol.DeepCopy(), obs: Observation{Generation: vol.Generation, Now: r.now()}}
	defer func() {
		if s.gone || s.stale {
			return
		}
		r.deriveStatus(s, reterr == nil)
		// Optimistic lock: a status computed from a stale read (which could
		// hold another placement) never overwrites a newer one.
		if err := r.Client.Status().Patch(ctx, vol, client.MergeFromWithOptions(s.before, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()
	if !vol.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

// deriveStatus writes conditions and phase from the pass's observation.
// ObservedGeneration moves only when the whole pass succeeded and reached
// the dataplane: a pass that found the pool missing, the server lost or no
// capacity returns without error but did not apply the spec.
func (r *Reconciler) deriveStatus(s *scope, passOK bool) {
	st := &s.vol.Status
	SetConditions(&st.Conditions, &s.obs)
	st.Phase = Phase(&s.obs)
	o := &s.obs
	notApplied := o.PoolMissing || o.lost() || o.NoCapacity != ""
	if passOK && !notApplied && o.DataplaneError == "" && o.CephError == "" {
		st.ObservedGeneration = s.vol.Generation
	}
}

func (r *Reconciler) apiReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reconciler) rng() *rand.Rand {
	if r.Rand == nil {
		seed := uint64(time.Now().UnixNano())
		r.Rand = rand.New(rand.NewPCG(seed, seed>>1|1))
	}
	return r.Rand
}

func (r *Reconciler) event(vol *rcv1.CachedVolume, eventType, reason, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(vol, eventType, reason, format, args...)
	}
}

// statsRequeue is when a served volume is looked at again.
func (r *Reconciler) statsRequeue() ctrl.Result {
	if r.StatsInterval <= 0 {
		return ctrl.Result{RequeueAfter: 30 * time.Second}
	}
	return ctrl.Result{RequeueAfter: r.StatsInterval}
}

// flushRequeue is when a running flush is polled again.
func (r *Reconciler) flushRequeue() ctrl.Result {
	if r.StatsInterval > 0 && r.StatsInterval < flushPollInterval {
		return ctrl.Result{RequeueAfter: r.StatsInterval}
	}
	return ctrl.Result{RequeueAfter: flushPollInterval}
}

// SetupWithManager registers the reconciler. One pass at a time: placement
// reads the allocation of the other volumes, which a concurrent pass could
// be changing.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&rcv1.CachedVolume{}).
		Watches(&rcv1.CachePool{}, handler.EnqueueRequestsFromMapFunc(r.volumesOfPool))
	if r.LeaseEvents != nil {
		b = b.WatchesRawSource(source.Channel(r.LeaseEvents, handler.EnqueueRequestsFromMapFunc(r.volumesOfPool)))
	}
	return b.WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Named("cachedvolume").
		Complete(r)
}

// volumesOfPool maps a CachePool to its volumes: its servers' state
// (readiness, capacity, load) drives their placement and lost-server rules.
func (r *Reconciler) volumesOfPool(ctx context.Context, obj client.Object) []reconcile.Request {
	var vols rcv1.CachedVolumeList
	if err := r.Client.List(ctx, &vols); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list CachedVolumes for a CachePool change", "cachePool", obj.GetName())
		return nil
	}
	var out []reconcile.Request
	for i := range vols.Items {
		if vols.Items[i].Spec.PoolName == obj.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&vols.Items[i])})
		}
	}
	return out
}
