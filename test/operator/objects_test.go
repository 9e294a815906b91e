package operator

// Builders of the suite's CachePools and CachedVolumes and the waits on
// their status.

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/test/framework/standin"
)

// poolInput says which CachePool to create.
type poolInput struct {
	Name string
	// WriteMode of the pool's volumes (WriteThrough when empty).
	WriteMode rcv1.WriteMode
	// RookNamespace, when set, makes the pool read Ceph from Rook's
	// objects there; otherwise it names the suite's monitor and user Secret.
	RookNamespace string
	// AllowCrossRack is placement.allowCrossRack (the default when nil).
	AllowCrossRack *bool
	// TLS is dataPath.tls.
	TLS bool
}

// createPool creates a pool whose nodes are labelled standin.PoolNodeLabel=<name>,
// with one cache device (a path each stand-in server maps to its own file),
// cleaning off (dirty data stays until a flush, so specs can see it) and no
// sequential cutoff (the guest's sequential writes are cached). It is
// deleted when the spec or container ends.
func createPool(ctx context.Context, in poolInput) *rcv1.CachePool {
	GinkgoHelper()
	pool := &rcv1.CachePool{
		ObjectMeta: metav1.ObjectMeta{Name: in.Name},
		Spec: rcv1.CachePoolSpec{
			NodeSelector: map[string]string{standin.PoolNodeLabel: in.Name},
			Devices:      []rcv1.CacheDevice{{Path: "/dev/disk/by-id/nvme-rackcache-test-" + in.Name}},
			WriteMode:    in.WriteMode,
			Port:         int32(nvmePort),
			Policies: rcv1.CachePolicy{
				Cleaning:  &rcv1.Cleaning{Policy: rcv1.CleaningNop},
				SeqCutoff: &rcv1.SeqCutoff{Policy: rcv1.SeqCutoffNever},
			},
			Placement: rcv1.Placement{AllowCrossRack: in.AllowCrossRack},
			DataPath:  rcv1.DataPath{TLS: in.TLS},
			Image:     "rackcache/dataplane:test",
		},
	}
	if in.RookNamespace != "" {
		pool.Spec.Ceph.Rook = &rcv1.RookBackend{Namespace: in.RookNamespace}
	} else {
		pool.Spec.Ceph.Monitors = []string{cephMonitor()}
		pool.Spec.Ceph.SecretRef = &rcv1.SecretReference{Name: cephUserSecret, Namespace: operatorNamespace}
	}
	Expect(k8s.Create(ctx, pool)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { cleanUp(ctx, pool) })
	return pool
}

// volumeInput says which CachedVolume to create.
type volumeInput struct {
	Name string
	Pool *rcv1.CachePool
	// SizeMiB is the RBD image's size; CacheSize the volume's cache share
	// (the API's default when empty).
	SizeMiB   int
	CacheSize string
	Rack      string
	WriteMode rcv1.WriteMode
	// AllowedHosts may connect (none when empty).
	AllowedHosts []string
}

// createVolume creates the RBD image (the CSI controller's part) and the
// CachedVolume; the volume is deleted (its finalizer waited for) when the
// spec or container ends, before its servers stop.
func createVolume(ctx context.Context, in volumeInput) *rcv1.CachedVolume {
	GinkgoHelper()
	createRbdImage(ctx, in.Name, in.SizeMiB)
	vol := &rcv1.CachedVolume{
		ObjectMeta: metav1.ObjectMeta{Name: in.Name},
		Spec: rcv1.CachedVolumeSpec{
			PoolName:     in.Pool.Name,
			RBD:          rcv1.RBDImage{Pool: ceph.Pool, Image: in.Name},
			Size:         *resource.NewQuantity(int64(in.SizeMiB)<<20, resource.BinarySI),
			CacheSize:    rcv1.CacheSize(in.CacheSize),
			Rack:         in.Rack,
			WriteMode:    in.WriteMode,
			AllowedHosts: in.AllowedHosts,
		},
	}
	Expect(k8s.Create(ctx, vol)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { cleanUp(ctx, vol) })
	return vol
}

// cleanUp deletes obj when its spec or container ends. After a failure its
// server may be gone already, so its finalizer gets a short wait only.
func cleanUp(ctx context.Context, obj client.Object) {
	GinkgoHelper()
	timeout := deleteTimeout
	if CurrentSpecReport().Failed() {
		timeout = failedCleanupTimeout
	}
	deleteWithin(ctx, obj, timeout)
}

// deleteAndWait deletes obj and waits until its finalizers let it go.
func deleteAndWait(ctx context.Context, obj client.Object) {
	GinkgoHelper()
	deleteWithin(ctx, obj, deleteTimeout)
}

// deleteWithin deletes obj and waits until its finalizers let it go. One
// that is still there after timeout fails the spec, then loses its
// finalizers so the rest of the suite can go on.
func deleteWithin(ctx context.Context, obj client.Object, timeout time.Duration) {
	GinkgoHelper()
	if err := k8s.Delete(ctx, obj); apierrors.IsNotFound(err) {
		return
	} else {
		Expect(err).NotTo(HaveOccurred())
	}
	gone := func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj) }
	ok := InterceptGomegaFailure(func() {
		Eventually(gone).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(
			Satisfy(apierrors.IsNotFound), "%T %s is deleted (its finalizer done)", obj, obj.GetName())
	})
	if ok != nil {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); err == nil {
			obj.SetFinalizers(nil)
			_ = k8s.Update(ctx, obj)
		}
		Fail(ok.Error())
	}
}

// getPool and getVolume read the current object.
func getPool(g Gomega, ctx context.Context, name string) *rcv1.CachePool {
	var p rcv1.CachePool
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, &p)).To(Succeed())
	return &p
}

func getVolume(g Gomega, ctx context.Context, name string) *rcv1.CachedVolume {
	var v rcv1.CachedVolume
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, &v)).To(Succeed())
	return &v
}

// waitPoolReady waits until pool is Ready with servers ready servers and
// returns it.
func waitPoolReady(ctx context.Context, name string, servers int) *rcv1.CachePool {
	GinkgoHelper()
	var pool *rcv1.CachePool
	Eventually(func(g Gomega) {
		pool = getPool(g, ctx, name)
		g.Expect(pool.Status.ReadyServers).To(BeEquivalentTo(servers), "ready servers")
		g.Expect(meta.IsStatusConditionTrue(pool.Status.Conditions, rcv1.ConditionReady)).To(BeTrue(), "Ready: %v", pool.Status.Conditions)
		g.Expect(pool.Status.ObservedGeneration).To(Equal(pool.Generation))
	}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed(), "pool %s becomes Ready with %d servers", name, servers)
	return pool
}

// waitVolumeReady waits until the volume is Ready (phase and condition)
// and returns it.
func waitVolumeReady(ctx context.Context, name string) *rcv1.CachedVolume {
	GinkgoHelper()
	var vol *rcv1.CachedVolume
	Eventually(func(g Gomega) {
		vol = getVolume(g, ctx, name)
		g.Expect(vol.Status.Phase).To(Equal(rcv1.VolumeReady), "phase; conditions %v", vol.Status.Conditions)
		g.Expect(meta.IsStatusConditionTrue(vol.Status.Conditions, rcv1.ConditionReady)).To(BeTrue(), "Ready: %v", vol.Status.Conditions)
		g.Expect(vol.Status.NQN).NotTo(BeEmpty())
	}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed(), "volume %s becomes Ready", name)
	return vol
}

// condition is the condition of type t, or nil.
func condition(conds []metav1.Condition, t string) *metav1.Condition {
	return meta.FindStatusCondition(conds, t)
}

// elapsedSince is for log lines only (never asserted: no timing thresholds).
func elapsedSince(t time.Time) string { return time.Since(t).Round(time.Millisecond).String() }
