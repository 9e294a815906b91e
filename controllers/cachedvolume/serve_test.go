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
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/ceph"
	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/controllers/hostkeys"
	"github.com/rackcache/rackcache/test/framework"
)

// TestReconcilerServesVolume runs Reconcile passes against a real
// apiserver, a real dataplane and real Ceph: a write-back volume becomes
// Ready with its status and metrics, survives a kill -9 and a restart
// without configuration (Recovered, dirty data kept), leaves write-back
// through a flush, and is deleted (flushed, removed, metrics gone).
func TestReconcilerServesVolume(t *testing.T) {
	g := newReconcilerRig(t)
	cluster := framework.StartCeph(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if out, err := cluster.Admin(ctx, "rbd", "create", "--size", "64M", cluster.Pool+"/cv-e2e"); err != nil {
		t.Fatalf("create rbd image: %v\n%s", err, out)
	}
	cacheFile := filepath.Join(t.TempDir(), "cache0.img")
	if err := os.WriteFile(cacheFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(cacheFile, 128<<20); err != nil {
		t.Fatal(err)
	}
	port := framework.FreeLoopbackPort(t)
	dp := startServer(t, cacheFile, cluster)
	g.r.Dial = func(context.Context, string, string, string) (*dataplane.Client, error) { return dp.Client, nil }

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "ceph-user", Namespace: "default"},
		Data:       map[string][]byte{ceph.UserIDKey: []byte(cluster.User), ceph.UserKeyKey: []byte(cluster.Key)},
	}
	pool := &rcv1.CachePool{
		ObjectMeta: metav1.ObjectMeta{Name: "fast"},
		Spec: rcv1.CachePoolSpec{
			NodeSelector: map[string]string{"rackcache.io/cache-server": "true"},
			Devices:      []rcv1.CacheDevice{{Path: cacheFile}},
			Port:         int32(port),
			Ceph:         rcv1.CephBackend{Monitors: []string{cluster.MonV1}, SecretRef: &rcv1.SecretReference{Name: "ceph-user", Namespace: "default"}},
			Image:        "rackcache/dataplane:test",
			// The data path on its own network: listeners and the
			// volume's address follow the server's address in it, not
			// the node's (which JSON-RPC uses).
			DataPath: rcv1.DataPath{Network: "127.0.0.0/8"},
		},
	}
	vol := &rcv1.CachedVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e"},
		Spec: rcv1.CachedVolumeSpec{
			PoolName: "fast", RBD: rcv1.RBDImage{Pool: cluster.Pool, Image: "cv-e2e"},
			Size: resource.MustParse("64Mi"), CacheSize: "16Mi", Rack: "r1", WriteMode: rcv1.WriteBack,
			Policies: rcv1.CachePolicy{
				Cleaning:  &rcv1.Cleaning{Policy: rcv1.CleaningNop},
				SeqCutoff: &rcv1.SeqCutoff{Policy: rcv1.SeqCutoffNever},
			},
			AllowedHosts: []string{loadgenHostNQN},
		},
	}
	for _, obj := range []client.Object{secret, pool, vol} {
		if err := g.c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	srv := server("n1", "r1", true, "100Mi")
	srv.Address, srv.DataAddress = "127.0.0.9", "127.0.0.1"
	g.setServers(pool, srv)

	if _, _, err := g.pass("e2e"); err != nil { // adds the finalizer
		t.Fatal(err)
	}
	got, res, err := g.pass("e2e")
	if err != nil {
		t.Fatalf("serving pass: %v", err)
	}
	st := got.Status
	if st.Phase != rcv1.VolumeReady || condition(got, rcv1.ConditionReady).Status != metav1.ConditionTrue ||
		st.Server != "n1" || st.Address != "127.0.0.1" || st.Port != int32(port) || st.NQN != SubsystemNQN("e2e") ||
		st.WriteMode != rcv1.WriteBack || st.Stats.HitRatio == "" || st.ObservedGeneration != got.Generation || res.RequeueAfter != 30*time.Second {
		t.Fatalf("after the first serving pass: %+v (requeue %v)", st, res.RequeueAfter)
	}
	g.event("Placed")
	g.noEvent("Recovered") // a first creation is no recovery
	if v, ok := gauge("rackcache_volume_cache_size_bytes", "e2e"); !ok || v != 16<<20 {
		t.Errorf("cache size metric %v (present %v), want 16 MiB", v, ok)
	}

	// The pool authenticates hosts (the CRD's default): the operator made
	// the allowed host a key pair in the volume's Secret, and the
	// dataplane serves the host only when it proves it.
	keys := g.hostKeys("e2e-host-keys", 1)
	if err := runLoad(t, port, st.NQN); err == nil {
		t.Fatal("the allowed host NQN without its key wrote to the volume")
	}
	if err := runLoad(t, port, st.NQN, keys); err != nil {
		t.Fatalf("write load: %v", err)
	}
	got, _, _ = g.pass("e2e")
	if got.Status.Stats.Dirty == nil || got.Status.Stats.Dirty.IsZero() || got.Status.Stats.WrittenBytes == 0 {
		t.Fatalf("stats after writing: %+v", got.Status.Stats)
	}
	if v, ok := gauge("rackcache_volume_dirty_bytes", "e2e"); !ok || v == 0 {
		t.Errorf("dirty metric %v (present %v)", v, ok)
	}

	// kill -9, restart without the configuration: the pass re-creates the
	// objects, re-attaching the cache with its dirty data.
	dp.Kill(t)
	dp = startServer(t, cacheFile, cluster)
	got, _, err = g.pass("e2e")
	if err != nil || got.Status.Phase != rcv1.VolumeReady || got.Status.Stats.Dirty == nil || got.Status.Stats.Dirty.IsZero() {
		t.Fatalf("after the restart: %v, %+v", err, got.Status)
	}
	g.event("Recovered")

	// Rotation on demand: the next generation replaces the pair in the
	// Secret and in the dataplane, whose keyring keeps only keys in use:
	// its own, never another volume's whose name starts like it.
	other := keyPrefix("e2e.x") + "0123456789abcdef.1.host.abcd1234"
	if err := dp.Client.AddMemoryKey(ctx, other, dataplane.Secret(keys.Host)); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(got.DeepCopy())
	got.Annotations = map[string]string{rcv1.RotateHostKeysAnnotation: "now"}
	if err := g.c.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	if _, _, err = g.pass("e2e"); err != nil {
		t.Fatalf("pass after the rotation request: %v", err)
	}
	rotated := g.hostKeys("e2e-host-keys", 2)
	if rotated.Host == keys.Host || rotated.Ctrl == keys.Ctrl {
		t.Fatal("rotation kept a key")
	}
	if err := runLoad(t, port, st.NQN, keys); err == nil {
		t.Fatal("the replaced keys still authenticate")
	}
	if err := runLoad(t, port, st.NQN, rotated); err != nil {
		t.Fatalf("write load with the rotated keys: %v", err)
	}
	if names, err := hostKeyNames(ctx, dp.Client, "e2e"); err != nil || len(names) != 2 {
		t.Fatalf("the dataplane's keys of the volume after rotation: %v, %v", names, err)
	}
	if names, err := keyringNames(ctx, dp.Client, other); err != nil || !names[other] {
		t.Fatalf("volume e2e.x's key was dropped with e2e's: %v, %v", names, err)
	}
	got, _, _ = g.pass("e2e") // the same request again rotates nothing
	g.hostKeys("e2e-host-keys", 2)
	keys = rotated

	// A flush request (the CSI driver's, before a snapshot): answered in
	// status.flushedRequest only once the dataplane holds no dirty data.
	patch = client.MergeFrom(got.DeepCopy())
	got.Annotations = map[string]string{rcv1.RotateHostKeysAnnotation: "now", rcv1.FlushRequestAnnotation: "snap-1"}
	if err := g.c.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	got, res, _ = g.pass("e2e")
	if got.Status.FlushedRequest == "snap-1" || res.RequeueAfter != flushPollInterval {
		t.Fatalf("the first pass after the request answered it with dirty data cached: %+v (requeue %v)", got.Status, res.RequeueAfter)
	}
	waitFor(t, "the flush request's answer", func() bool {
		got, _, _ = g.pass("e2e")
		return got.Status.FlushedRequest == "snap-1"
	})
	if fs, err := dp.Client.CachedBdevFlushStatus(ctx, CachedBdevName("e2e")); err != nil || fs.DirtyBytes != 0 {
		t.Fatalf("flush request answered, but the dataplane reports %+v, %v", fs, err)
	}
	if err := runLoad(t, port, st.NQN, keys); err != nil { // dirty again for the switch below
		t.Fatalf("write load: %v", err)
	}

	// Leaving write-back: Flushing first, then the switch and an event.
	got, _, _ = g.pass("e2e")
	patch = client.MergeFrom(got.DeepCopy())
	got.Spec.WriteMode = rcv1.WriteThrough
	if err := g.c.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	got, res, _ = g.pass("e2e")
	if got.Status.Phase != rcv1.VolumeFlushing || condition(got, rcv1.ConditionFlushed).Reason != rcv1.ReasonFlushing ||
		got.Status.Flush == nil || !got.Status.Flush.InProgress || res.RequeueAfter != flushPollInterval {
		t.Fatalf("first pass leaving write-back: %+v flushed %+v requeue %v", got.Status, condition(got, rcv1.ConditionFlushed), res.RequeueAfter)
	}
	waitFor(t, "the switch to write-through", func() bool {
		got, _, _ = g.pass("e2e")
		return got.Status.WriteMode == rcv1.WriteThrough && got.Status.Phase == rcv1.VolumeReady
	})
	g.event("Flushed")

	// Deletion: flushed (nothing dirty now), removed, finalizer dropped.
	if err := g.c.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deletion", func() bool {
		got, _, _ = g.pass("e2e")
		return got == nil
	})
	g.event("Flushed")
	if sub, err := lookupSubsystem(ctx, dp.Client, SubsystemNQN("e2e")); sub != nil || err != nil {
		t.Errorf("subsystem left after deletion: %+v, %v", sub, err)
	}
	if cb, err := lookupCachedBdev(ctx, dp.Client, CachedBdevName("e2e")); cb != nil || err != nil {
		t.Errorf("cached bdev left after deletion: %+v, %v", cb, err)
	}
	if _, ok := gauge("rackcache_volume_cache_size_bytes", "e2e"); ok {
		t.Errorf("metrics of the deleted volume remain")
	}
	if names, err := keyringNames(ctx, dp.Client, keyPrefix("e2e")); err != nil || len(names) != 1 || !names[other] {
		t.Errorf("the dataplane's keys named like the deleted volume's: %v, %v; want only volume e2e.x's", names, err)
	}
}

// hostKeys reads the loadgen host's pair from the operator's Secret name
// and checks its generation and that the Secret goes with its volume.
func (g *reconcilerRig) hostKeys(name string, generation int64) hostkeys.Pair {
	host := loadgenHostNQN
	g.t.Helper()
	sec := &corev1.Secret{}
	if err := g.c.Get(context.Background(), client.ObjectKey{Namespace: "rackcache-system", Name: name}, sec); err != nil {
		g.t.Fatalf("the host keys Secret: %v", err)
	}
	if len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].Kind != "CachedVolume" {
		g.t.Errorf("host keys Secret owners: %+v", sec.OwnerReferences)
	}
	p, ok := hostkeys.Pairs(sec.Data)[host]
	if !ok || p.Generation != generation {
		g.t.Fatalf("host %s in the Secret: present %v, generation %d, want %d", host, ok, p.Generation, generation)
	}
	return p
}

// gauge reads a volume's series from controller-runtime's registry.
func gauge(name, volume string) (float64, bool) {
	families, err := metrics.Registry.Gather()
	if err != nil {
		return 0, false
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "volume" && l.GetValue() == volume {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// waitFor polls cond (each poll a reconcile pass) for up to 3 minutes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 3 minutes", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
