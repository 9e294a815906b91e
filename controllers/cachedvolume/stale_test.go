package cachedvolume

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// TestStaleCacheDoesNotPlaceTwice: the informer cache still holds the
// volume without a server while the apiserver already has the placement
// an earlier pass wrote. The pass must not place again (it would create
// the volume on a second server) and must write no status.
func TestStaleCacheDoesNotPlaceTwice(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := rcv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	capacity := resource.MustParse("1Gi")
	pool := &rcv1.CachePool{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	pool.Status.Servers = []rcv1.ServerStatus{
		{NodeName: "a", Ready: true, Capacity: &capacity, Address: "127.0.0.2"},
		{NodeName: "b", Ready: true, Capacity: &capacity, Address: "127.0.0.3"},
	}
	stale := &rcv1.CachedVolume{ObjectMeta: metav1.ObjectMeta{Name: "v", Finalizers: []string{rcv1.CachedVolumeFinalizer}}}
	stale.Spec = rcv1.CachedVolumeSpec{PoolName: "p", Size: resource.MustParse("1Gi"), CacheSize: "10%"}
	cached := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pool, stale.DeepCopy()).
		WithStatusSubresource(&rcv1.CachedVolume{}, &rcv1.CachePool{}).Build()
	// The apiserver's newer copy: placed on a, by the previous pass.
	placed := stale.DeepCopy()
	placed.Status.Server = "a"
	apiserver := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pool, placed).
		WithStatusSubresource(&rcv1.CachedVolume{}, &rcv1.CachePool{}).Build()
	// Make the apiserver's copy newer than the cache's.
	if err := apiserver.Status().Update(context.Background(), placed); err != nil {
		t.Fatal(err)
	}

	r := &Reconciler{Client: cached, APIReader: apiserver}
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Name: "v"}})
	if err != nil || res.RequeueAfter == 0 {
		t.Fatalf("pass on a stale read: %+v, %v; want a requeue and no error", res, err)
	}
	var after rcv1.CachedVolume
	if err := cached.Get(context.Background(), types.NamespacedName{Name: "v"}, &after); err != nil {
		t.Fatal(err)
	}
	if after.Status.Server != "" || len(after.Status.Conditions) != 0 {
		t.Errorf("the stale pass placed or wrote status: server %q, conditions %v", after.Status.Server, after.Status.Conditions)
	}
}
