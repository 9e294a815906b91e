package cachedvolume

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/ceph"
	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/test/framework"
)

// TestRevocationNeedsNoCeph: a host removed from a volume's allowedHosts
// is revoked on the volume's server by the next pass even when that pass
// cannot resolve the pool's Ceph backend (its Secret is gone). The pass
// fails on Ceph; the subsystem no longer allows the host all the same.
func TestRevocationNeedsNoCeph(t *testing.T) {
	g := newReconcilerRig(t)
	cluster := framework.StartCeph(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := cluster.Admin(ctx, "rbd", "create", "--size", "64M", cluster.Pool+"/cv-revoke"); err != nil {
		t.Fatalf("create rbd image: %v\n%s", err, out)
	}
	cacheFile := filepath.Join(t.TempDir(), "cache0.img")
	if err := os.WriteFile(cacheFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(cacheFile, 64<<20); err != nil {
		t.Fatal(err)
	}
	dp := startServer(t, cacheFile, cluster)
	g.r.Dial = func(context.Context, string, string, string) (*dataplane.Client, error) { return dp.Client, nil }

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "ceph-revoke", Namespace: "default"},
		Data:       map[string][]byte{ceph.UserIDKey: []byte(cluster.User), ceph.UserKeyKey: []byte(cluster.Key)},
	}
	pool := &rcv1.CachePool{
		ObjectMeta: metav1.ObjectMeta{Name: "revoke"},
		Spec: rcv1.CachePoolSpec{
			NodeSelector: map[string]string{"rackcache.io/cache-server": "true"},
			Devices:      []rcv1.CacheDevice{{Path: cacheFile}},
			Port:         int32(framework.FreeLoopbackPort(t)),
			Ceph:         rcv1.CephBackend{Monitors: []string{cluster.MonV1}, SecretRef: &rcv1.SecretReference{Name: "ceph-revoke", Namespace: "default"}},
			Image:        "rackcache/dataplane:test",
		},
	}
	vol := &rcv1.CachedVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "rv"},
		Spec: rcv1.CachedVolumeSpec{
			PoolName: "revoke", RBD: rcv1.RBDImage{Pool: cluster.Pool, Image: "cv-revoke"},
			Size: resource.MustParse("64Mi"), CacheSize: "16Mi", Rack: "r1", WriteMode: rcv1.WriteThrough,
			AllowedHosts: []string{loadgenHostNQN},
		},
	}
	for _, obj := range []client.Object{secret, pool, vol} {
		if err := g.c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	srv := server("n1", "r1", true, "60Mi")
	srv.Address = "127.0.0.1"
	g.setServers(pool, srv)
	if _, _, err := g.pass("rv"); err != nil { // adds the finalizer
		t.Fatal(err)
	}
	if got, _, err := g.pass("rv"); err != nil || got.Status.Phase != rcv1.VolumeReady {
		t.Fatalf("serving pass: %v, %+v", err, got.Status)
	}
	if sub, err := lookupSubsystem(ctx, dp.Client, SubsystemNQN("rv")); err != nil || sub == nil || len(sub.Hosts) != 1 {
		t.Fatalf("subsystem after serving: %+v, %v", sub, err)
	}

	// Ceph becomes unresolvable, and the host is taken off the list.
	if err := g.c.Delete(ctx, secret); err != nil {
		t.Fatal(err)
	}
	got := &rcv1.CachedVolume{}
	if err := g.c.Get(ctx, client.ObjectKey{Name: "rv"}, got); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(got.DeepCopy())
	got.Spec.AllowedHosts = nil
	if err := g.c.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.pass("rv"); err == nil {
		t.Fatal("a pass without the Ceph Secret succeeded")
	}
	sub, err := lookupSubsystem(ctx, dp.Client, SubsystemNQN("rv"))
	if err != nil || sub == nil {
		t.Fatalf("subsystem after the failed pass: %+v, %v", sub, err)
	}
	if len(sub.Hosts) != 0 {
		t.Errorf("host still allowed after it left allowedHosts (the pass failed on Ceph): %+v", sub.Hosts)
	}
}
