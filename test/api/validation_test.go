// Package api tests the CRDs against a real kube-apiserver: valid objects
// are accepted with their defaults, and every marker and CEL rule rejects a
// violating object with the message that says what to fix.
package api

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/test/framework"
)

// TestCRDValidation starts one apiserver with the CRDs and runs every case
// against it.
func TestCRDValidation(t *testing.T) {
	c, cfg := apiClient(t)
	t.Run("CachePoolDefaultsAndValid", func(t *testing.T) { testCachePoolDefaultsAndValid(t, c) })
	t.Run("CachePoolRejects", func(t *testing.T) { testCachePoolRejects(t, c) })
	t.Run("CachedVolumeDefaultsAndRejects", func(t *testing.T) { testCachedVolumeDefaultsAndRejects(t, c) })
	t.Run("CachedVolumeImmutableAndTransitions", func(t *testing.T) { testCachedVolumeImmutableAndTransitions(t, c) })
	t.Run("SamplesAccepted", func(t *testing.T) { testSamplesAccepted(t, c) })
	t.Run("PrinterColumns", func(t *testing.T) { testPrinterColumns(t, c, cfg) })
	t.Run("IntegerQuantities", func(t *testing.T) { testIntegerQuantities(t, c) })
}

func apiClient(t *testing.T) (client.Client, *rest.Config) {
	t.Helper()
	_, cfg := framework.StartEnvtest(t, filepath.Join(framework.RepoRoot(), "config", "crd", "bases"))
	scheme := runtime.NewScheme()
	if err := rcv1.AddToScheme(scheme); err != nil {
		t.Fatalf("scheme: %v", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return c, cfg
}

func validPool(name string) *rcv1.CachePool {
	return &rcv1.CachePool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: rcv1.CachePoolSpec{
			NodeSelector: map[string]string{"rackcache.io/cache-server": "true"},
			Devices:      []rcv1.CacheDevice{{Path: "/dev/nvme1n1", Size: ptr.To(resource.MustParse("800Gi"))}},
			Ceph: rcv1.CephBackend{
				Monitors:  []string{"10.0.0.1:6789", "[fd00::1]:3300"},
				SecretRef: &rcv1.SecretReference{Name: "ceph-user", Namespace: "rackcache-system"},
			},
			Image: "rackcache/dataplane:dev",
		},
	}
}

func validVolume(name string) *rcv1.CachedVolume {
	return &rcv1.CachedVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: rcv1.CachedVolumeSpec{
			PoolName: "fast",
			RBD:      rcv1.RBDImage{Pool: "rbd", Image: "csi-vol-" + name},
			Size:     resource.MustParse("100Gi"),
		},
	}
}

// expectRejected creates obj and wants the apiserver to refuse it with a
// message containing want.
func expectRejected(t *testing.T, c client.Client, obj client.Object, want string) {
	t.Helper()
	err := c.Create(context.Background(), obj)
	if err == nil {
		_ = c.Delete(context.Background(), obj)
		t.Fatalf("apiserver accepted %s, want rejection with %q", obj.GetName(), want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("apiserver rejected %s with\n  %v\nwant a message containing %q", obj.GetName(), err, want)
	}
}

func testCachePoolDefaultsAndValid(t *testing.T, c client.Client) {
	ctx := context.Background()
	pool := validPool("defaults")
	if err := c.Create(ctx, pool); err != nil {
		t.Fatalf("create valid pool: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, pool) })
	got := &rcv1.CachePool{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pool), got); err != nil {
		t.Fatalf("get: %v", err)
	}
	s := got.Spec
	if want := []rcv1.BlockSizeKiB{32, 64, 128, 256}; len(s.BlockSizesKiB) != 4 || s.BlockSizesKiB[0] != want[0] || s.BlockSizesKiB[3] != want[3] {
		t.Errorf("blockSizesKiB default = %v, want %v", s.BlockSizesKiB, want)
	}
	if s.AllocationMode != rcv1.Adaptive || s.WriteMode != rcv1.WriteThrough || s.Port != 4420 {
		t.Errorf("defaults: allocationMode %q writeMode %q port %d, want Adaptive WriteThrough 4420", s.AllocationMode, s.WriteMode, s.Port)
	}
	if s.Placement.RackLabel != rcv1.DefaultRackLabel || s.Placement.AllowCrossRack == nil || !*s.Placement.AllowCrossRack {
		t.Errorf("placement defaults = %+v, want rackLabel %q allowCrossRack true", s.Placement, rcv1.DefaultRackLabel)
	}

	rook := validPool("rook")
	rook.Spec.Ceph = rcv1.CephBackend{Rook: &rcv1.RookBackend{Namespace: "rook-ceph"}}
	rook.Spec.AllocationMode = rcv1.Fixed
	rook.Spec.BlockSizesKiB = []rcv1.BlockSizeKiB{4}
	rook.Spec.WriteMode = rcv1.WriteBack
	rook.Spec.Policies = rcv1.CachePolicy{
		Admission: "nhit:2", Eviction: "lazy:4:2",
		Cleaning:  &rcv1.Cleaning{Policy: rcv1.CleaningLazy, StalenessMs: ptr.To[int32](1000), WakeUpMs: ptr.To[int32](100)},
		SeqCutoff: &rcv1.SeqCutoff{Policy: rcv1.SeqCutoffFull, ThresholdKiB: ptr.To[int32](1024)},
	}
	if err := c.Create(ctx, rook); err != nil {
		t.Fatalf("create valid Rook pool: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, rook) })
}

func testCachePoolRejects(t *testing.T, c client.Client) {
	cases := []struct {
		name   string
		mutate func(*rcv1.CachePool)
		want   string
	}{
		{"block size not a power of two", func(p *rcv1.CachePool) { p.Spec.BlockSizesKiB = []rcv1.BlockSizeKiB{32, 48} },
			"block sizes are in KiB and must be a power of two from 4 (4 KiB) to 1024 (1 MiB)"},
		{"block size below 4 KiB", func(p *rcv1.CachePool) { p.Spec.BlockSizesKiB = []rcv1.BlockSizeKiB{2} },
			"must be a power of two from 4 (4 KiB) to 1024 (1 MiB)"},
		{"block size above 1 MiB", func(p *rcv1.CachePool) { p.Spec.BlockSizesKiB = []rcv1.BlockSizeKiB{2048} },
			"must be a power of two from 4 (4 KiB) to 1024 (1 MiB)"},
		{"block sizes descending", func(p *rcv1.CachePool) { p.Spec.BlockSizesKiB = []rcv1.BlockSizeKiB{64, 32} },
			"blockSizesKiB must be in ascending order"},
		{"block sizes repeated", func(p *rcv1.CachePool) { p.Spec.BlockSizesKiB = []rcv1.BlockSizeKiB{32, 32, 64} },
			"blockSizesKiB must not repeat a size"},
		{"fixed with two sizes", func(p *rcv1.CachePool) {
			p.Spec.AllocationMode = rcv1.Fixed
			p.Spec.BlockSizesKiB = []rcv1.BlockSizeKiB{32, 64}
		}, "allocationMode Fixed uses exactly one block size"},
		{"relative device path", func(p *rcv1.CachePool) { p.Spec.Devices[0].Path = "dev/nvme1n1" },
			"device path must be absolute"},
		{"device path with ..", func(p *rcv1.CachePool) { p.Spec.Devices[0].Path = "/dev/../etc/passwd" },
			"device path must be absolute (start with /) and must not contain .."},
		{"zero device size", func(p *rcv1.CachePool) { p.Spec.Devices[0].Size = ptr.To(resource.MustParse("0")) },
			"device size must be a positive byte quantity"},
		{"both rook and monitors", func(p *rcv1.CachePool) { p.Spec.Ceph.Rook = &rcv1.RookBackend{Namespace: "rook-ceph"} },
			"set exactly one of ceph.rook"},
		{"neither rook nor monitors", func(p *rcv1.CachePool) { p.Spec.Ceph = rcv1.CephBackend{} },
			"set exactly one of ceph.rook"},
		{"monitors without secret", func(p *rcv1.CachePool) { p.Spec.Ceph.SecretRef = nil },
			"ceph.monitors needs ceph.secretRef"},
		{"rook with secret", func(p *rcv1.CachePool) {
			p.Spec.Ceph.Monitors = nil
			p.Spec.Ceph.Rook = &rcv1.RookBackend{Namespace: "rook-ceph"}
		}, "ceph.secretRef is not used with ceph.rook"},
		{"monitor without port", func(p *rcv1.CachePool) { p.Spec.Ceph.Monitors = []string{"10.0.0.1"} },
			"each monitor must be host:port or [ipv6]:port"},
		{"bad admission", func(p *rcv1.CachePool) { p.Spec.Policies.Admission = "nhit:0" },
			"admission must be one of always, nhit, nhit:N"},
		{"bad eviction", func(p *rcv1.CachePool) { p.Spec.Policies.Eviction = "lru" },
			"eviction must be lru2, lazy"},
		{"lazy fields on aggressive cleaning", func(p *rcv1.CachePool) {
			p.Spec.Policies.Cleaning = &rcv1.Cleaning{Policy: rcv1.CleaningAggressive, StalenessMs: ptr.To[int32](5)}
		}, "stalenessMs, maxBatch and activityThresholdMs apply only to policy Lazy"},
		{"aggressive fields on lazy cleaning", func(p *rcv1.CachePool) {
			p.Spec.Policies.Cleaning = &rcv1.Cleaning{Policy: rcv1.CleaningLazy, DirtyRatioPercent: ptr.To[int32](50)}
		}, "dirtyRatioPercent and batchBlocks apply only to policy Aggressive"},
		{"wake-up on nop cleaning", func(p *rcv1.CachePool) {
			p.Spec.Policies.Cleaning = &rcv1.Cleaning{Policy: rcv1.CleaningNop, WakeUpMs: ptr.To[int32](5)}
		}, "wakeUpMs does not apply to policy Nop"},
		{"unknown write mode", func(p *rcv1.CachePool) { p.Spec.WriteMode = "wb" },
			`Unsupported value: "wb"`},
		{"port out of range", func(p *rcv1.CachePool) { p.Spec.Port = 70000 },
			"should be less than or equal to 65535"},
		{"duplicate device", func(p *rcv1.CachePool) {
			p.Spec.Devices = append(p.Spec.Devices, rcv1.CacheDevice{Path: "/dev/nvme1n1"})
		}, "Duplicate value"},
		{"empty node selector", func(p *rcv1.CachePool) { p.Spec.NodeSelector = map[string]string{} },
			"spec.nodeSelector"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := validPool("bad-" + strings.ReplaceAll(strings.ToLower(tc.name), " ", "-"))
			tc.mutate(p)
			expectRejected(t, c, p, tc.want)
		})
	}
}

func testCachedVolumeDefaultsAndRejects(t *testing.T, c client.Client) {
	ctx := context.Background()
	v := validVolume("defaults")
	if err := c.Create(ctx, v); err != nil {
		t.Fatalf("create valid volume: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, v) })
	if v.Spec.CacheSize != "10%" {
		t.Errorf("cacheSize default = %q, want 10%%", v.Spec.CacheSize)
	}
	for _, ok := range []rcv1.CacheSize{"1%", "100%", "20Gi", "100Gi"} {
		w := validVolume("cache-" + strings.ToLower(strings.TrimSuffix(string(ok), "%")))
		w.Spec.CacheSize = ok
		if err := c.Create(ctx, w); err != nil {
			t.Errorf("cacheSize %q refused: %v", ok, err)
			continue
		}
		_ = c.Delete(ctx, w)
	}

	cases := []struct {
		name   string
		mutate func(*rcv1.CachedVolume)
		want   string
	}{
		{"percent over 100", func(v *rcv1.CachedVolume) { v.Spec.CacheSize = "150%" }, "cacheSize must be a positive byte quantity such as 10Gi, or a percentage"},
		{"zero percent", func(v *rcv1.CachedVolume) { v.Spec.CacheSize = "0%" }, "or a percentage of the volume from 1% to 100%"},
		{"garbage", func(v *rcv1.CachedVolume) { v.Spec.CacheSize = "lots" }, "cacheSize must be a positive byte quantity"},
		{"zero bytes", func(v *rcv1.CachedVolume) { v.Spec.CacheSize = "0" }, "cacheSize must be a positive byte quantity"},
		{"larger than volume", func(v *rcv1.CachedVolume) { v.Spec.CacheSize = "200Gi" }, "cacheSize must not exceed the volume's size"},
		{"zero size", func(v *rcv1.CachedVolume) { v.Spec.Size = resource.MustParse("0") }, "size must be a positive byte quantity"},
		{"host not an NQN", func(v *rcv1.CachedVolume) { v.Spec.AllowedHosts = []string{"node-1"} }, "each allowed host must be an NVMe host NQN"},
		{"bad write mode", func(v *rcv1.CachedVolume) { v.Spec.WriteMode = "wt" }, `Unsupported value: "wt"`},
		{"bad admission override", func(v *rcv1.CachedVolume) { v.Spec.Policies.Admission = "lfu" }, "admission must be one of"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := validVolume("bad-" + strings.ReplaceAll(strings.ToLower(tc.name), " ", "-"))
			tc.mutate(w)
			expectRejected(t, c, w, tc.want)
		})
	}
}

// expectUpdateRejected applies mutate to a fresh copy of obj and wants the
// update refused with want.
func expectUpdateRejected(t *testing.T, c client.Client, v *rcv1.CachedVolume, mutate func(*rcv1.CachedVolume), want string) {
	t.Helper()
	ctx := context.Background()
	w := &rcv1.CachedVolume{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(v), w); err != nil {
		t.Fatalf("get: %v", err)
	}
	mutate(w)
	err := c.Update(ctx, w)
	if err == nil {
		t.Fatalf("update accepted, want rejection with %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("update rejected with\n  %v\nwant a message containing %q", err, want)
	}
}

func testCachedVolumeImmutableAndTransitions(t *testing.T, c client.Client) {
	ctx := context.Background()
	v := validVolume("immutable")
	v.Spec.WriteMode = rcv1.WriteBack
	if err := c.Create(ctx, v); err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, v) })

	expectUpdateRejected(t, c, v, func(w *rcv1.CachedVolume) { w.Spec.PoolName = "other" }, "poolName is immutable")
	expectUpdateRejected(t, c, v, func(w *rcv1.CachedVolume) { w.Spec.RBD.Image = "other" }, "rbd (pool and image) is immutable")
	expectUpdateRejected(t, c, v, func(w *rcv1.CachedVolume) { w.Spec.RBD.Pool = "other" }, "rbd (pool and image) is immutable")
	expectUpdateRejected(t, c, v, func(w *rcv1.CachedVolume) { w.Spec.Size = resource.MustParse("50Gi") }, "size cannot shrink")

	// Growing is fine.
	grow := &rcv1.CachedVolume{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(v), grow); err != nil {
		t.Fatalf("get: %v", err)
	}
	grow.Spec.Size = resource.MustParse("200Gi")
	if err := c.Update(ctx, grow); err != nil {
		t.Fatalf("grow volume: %v", err)
	}

	// A Degraded write-back volume cannot flush, so it cannot leave WriteBack.
	grow.Status.Phase = rcv1.VolumeDegraded
	if err := c.Status().Update(ctx, grow); err != nil {
		t.Fatalf("set status Degraded: %v", err)
	}
	expectUpdateRejected(t, c, v, func(w *rcv1.CachedVolume) { w.Spec.WriteMode = rcv1.WriteThrough },
		"writeMode cannot leave WriteBack while the volume is Degraded or Failed")
	expectUpdateRejected(t, c, v, func(w *rcv1.CachedVolume) { w.Spec.WriteMode = "" },
		"writeMode cannot leave WriteBack while the volume is Degraded or Failed")

	// Once Ready again, the change is accepted; the reconciler flushes first.
	ready := &rcv1.CachedVolume{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(v), ready); err != nil {
		t.Fatalf("get: %v", err)
	}
	ready.Status.Phase = rcv1.VolumeReady
	if err := c.Status().Update(ctx, ready); err != nil {
		t.Fatalf("set status Ready: %v", err)
	}
	ready.Spec.WriteMode = rcv1.WriteThrough
	if err := c.Update(ctx, ready); err != nil {
		t.Fatalf("leave WriteBack on a Ready volume: %v", err)
	}
}

// testIntegerQuantities: YAML users may write sizes as plain integers; the
// CEL rules that read quantities must accept them too.
func testIntegerQuantities(t *testing.T, c client.Client) {
	ctx := context.Background()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rackcache.io/v1alpha1",
		"kind":       "CachedVolume",
		"metadata":   map[string]any{"name": "integer-size"},
		"spec": map[string]any{
			"poolName":  "fast",
			"rbd":       map[string]any{"pool": "rbd", "image": "integer-size"},
			"size":      int64(1 << 30),
			"cacheSize": "512Mi",
		},
	}}
	if err := c.Create(ctx, u); err != nil {
		t.Fatalf("volume with an integer size refused: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, u) })
	u.Object["spec"].(map[string]any)["size"] = int64(1 << 29)
	err := c.Update(ctx, u)
	if err == nil || !strings.Contains(err.Error(), "size cannot shrink") {
		t.Fatalf("shrinking an integer size: got %v, want %q", err, "size cannot shrink")
	}
}
