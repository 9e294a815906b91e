package api

import (
	"context"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// volumeRejects and volumeUpdateRejects are Entries of the CachedVolume
// tables; want is recorded for the rules spec.
func volumeRejects(name string, mutate func(*rcv1.CachedVolume), want string) TableEntry {
	testedMessages["CachedVolume"] = append(testedMessages["CachedVolume"], want)
	return Entry(name, name, mutate, want)
}

func volumeUpdateRejects(name string, mutate func(*rcv1.CachedVolume), want string) TableEntry {
	testedMessages["CachedVolume"] = append(testedMessages["CachedVolume"], want)
	return Entry(name, mutate, want)
}

// degradedWriteBackExit is the message of the rule that keeps a Degraded
// write-back volume in WriteBack.
const degradedWriteBackExit = "writeMode cannot leave WriteBack while the volume is Degraded or Failed"

var _ = Describe("CachedVolume", func() {
	It("defaults cacheSize to 10% of the volume", func(ctx context.Context) {
		v := validVolume("defaults")
		create(ctx, v)
		Expect(v.Spec.CacheSize).To(BeEquivalentTo("10%"))
	})

	DescribeTable("accepts cacheSize as bytes or a percentage",
		func(ctx context.Context, size rcv1.CacheSize) {
			w := validVolume("cache-" + strings.ToLower(strings.TrimSuffix(string(size), "%")))
			w.Spec.CacheSize = size
			create(ctx, w)
		},
		Entry(nil, rcv1.CacheSize("1%")),
		Entry(nil, rcv1.CacheSize("100%")),
		Entry(nil, rcv1.CacheSize("20Gi")),
		Entry(nil, rcv1.CacheSize("100Gi")),
	)

	// CachePool's table has every eviction spelling; the override shares
	// the type, these show the volume's copy of the rule took the change.
	DescribeTable("accepts an eviction override in the dataplane's syntax",
		func(ctx context.Context, eviction string) {
			v := validVolume("eviction-" + objectNamePart(eviction))
			v.Spec.Policies.Eviction = eviction
			create(ctx, v)
		},
		Entry(nil, "auto"),
		Entry(nil, "auto:s3fifo+lru2"),
		Entry(nil, "wtinylfu"),
	)

	DescribeTable("the apiserver rejects a violating volume with the rule's message",
		func(ctx context.Context, name string, mutate func(*rcv1.CachedVolume), want string) {
			w := validVolume("bad-" + strings.ReplaceAll(strings.ToLower(name), " ", "-"))
			mutate(w)
			expectCreateRejected(ctx, w, want)
		},
		volumeRejects("percent over 100", func(v *rcv1.CachedVolume) { v.Spec.CacheSize = "150%" },
			"cacheSize must be a positive byte quantity such as 10Gi, or a percentage"),
		volumeRejects("zero percent", func(v *rcv1.CachedVolume) { v.Spec.CacheSize = "0%" },
			"or a percentage of the volume from 1% to 100%"),
		volumeRejects("garbage", func(v *rcv1.CachedVolume) { v.Spec.CacheSize = "lots" },
			"cacheSize must be a positive byte quantity"),
		volumeRejects("zero bytes", func(v *rcv1.CachedVolume) { v.Spec.CacheSize = "0" },
			"cacheSize must be a positive byte quantity"),
		volumeRejects("larger than volume", func(v *rcv1.CachedVolume) { v.Spec.CacheSize = "200Gi" },
			"cacheSize must not exceed the volume's size"),
		volumeRejects("zero size", func(v *rcv1.CachedVolume) { v.Spec.Size = resource.MustParse("0") },
			"size must be a positive byte quantity"),
		volumeRejects("host not an NQN", func(v *rcv1.CachedVolume) { v.Spec.AllowedHosts = []string{"node-1"} },
			"each allowed host must be an NVMe host NQN"),
		volumeRejects("host keys Secret not a name", func(v *rcv1.CachedVolume) { v.Spec.HostKeysSecret = "Keys_Of_Vol" },
			"hostKeysSecret must be a Secret name"),
		volumeRejects("bad write mode", func(v *rcv1.CachedVolume) { v.Spec.WriteMode = "wt" },
			`Unsupported value: "wt"`),
		volumeRejects("bad admission override", func(v *rcv1.CachedVolume) { v.Spec.Policies.Admission = "lfu" },
			"admission must be one of"),
		volumeRejects("bad eviction override", func(v *rcv1.CachedVolume) { v.Spec.Policies.Eviction = "lazy:x" },
			"eviction must be auto, auto:P+P..."),
		volumeRejects("eviction override auto among lazy", func(v *rcv1.CachedVolume) { v.Spec.Policies.Eviction = "auto:lazy" },
			"eviction must be auto"),
		volumeRejects("lazy fields on aggressive cleaning override", func(v *rcv1.CachedVolume) {
			v.Spec.Policies.Cleaning = &rcv1.Cleaning{Policy: rcv1.CleaningAggressive, MaxBatch: ptr.To[int32](8)}
		}, "stalenessMs, maxBatch and activityThresholdMs apply only to policy Lazy"),
		volumeRejects("aggressive fields on lazy cleaning override", func(v *rcv1.CachedVolume) {
			v.Spec.Policies.Cleaning = &rcv1.Cleaning{Policy: rcv1.CleaningLazy, BatchBlocks: ptr.To[int32](8)}
		}, "dirtyRatioPercent and batchBlocks apply only to policy Aggressive"),
		volumeRejects("wake-up on nop cleaning override", func(v *rcv1.CachedVolume) {
			v.Spec.Policies.Cleaning = &rcv1.Cleaning{Policy: rcv1.CleaningNop, WakeUpMs: ptr.To[int32](5)}
		}, "wakeUpMs does not apply to policy Nop"),
	)

	Describe("updates", func() {
		var v *rcv1.CachedVolume
		BeforeEach(func(ctx context.Context) {
			v = validVolume("immutable")
			v.Spec.WriteMode = rcv1.WriteBack
			v.Spec.HostKeysSecret = "rackcache-keys-pvc-1"
			create(ctx, v)
		})

		DescribeTable("the apiserver rejects a change of an immutable field with the rule's message",
			func(ctx context.Context, mutate func(*rcv1.CachedVolume), want string) {
				expectUpdateRejected(ctx, v, mutate, want)
			},
			volumeUpdateRejects("poolName", func(w *rcv1.CachedVolume) { w.Spec.PoolName = "other" }, "poolName is immutable"),
			volumeUpdateRejects("rbd.image", func(w *rcv1.CachedVolume) { w.Spec.RBD.Image = "other" }, "rbd (pool and image) is immutable"),
			volumeUpdateRejects("rbd.pool", func(w *rcv1.CachedVolume) { w.Spec.RBD.Pool = "other" }, "rbd (pool and image) is immutable"),
			volumeUpdateRejects("hostKeysSecret", func(w *rcv1.CachedVolume) { w.Spec.HostKeysSecret = "other" }, "hostKeysSecret cannot change"),
			volumeUpdateRejects("size shrinking", func(w *rcv1.CachedVolume) { w.Spec.Size = resource.MustParse("50Gi") }, "size cannot shrink"),
		)

		It("lets the size grow", func(ctx context.Context) {
			grow := &rcv1.CachedVolume{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(v), grow)).To(Succeed())
			grow.Spec.Size = resource.MustParse("200Gi")
			Expect(k8s.Update(ctx, grow)).To(Succeed())
		})

		testedMessages["CachedVolume"] = append(testedMessages["CachedVolume"], degradedWriteBackExit)
		It("keeps a Degraded write-back volume in WriteBack and lets it leave once Ready", func(ctx context.Context) {
			// A Degraded write-back volume cannot flush, so it cannot leave
			// WriteBack.
			setPhase(ctx, v, rcv1.VolumeDegraded)
			expectUpdateRejected(ctx, v, func(w *rcv1.CachedVolume) { w.Spec.WriteMode = rcv1.WriteThrough }, degradedWriteBackExit)
			expectUpdateRejected(ctx, v, func(w *rcv1.CachedVolume) { w.Spec.WriteMode = "" }, degradedWriteBackExit)

			// Once Ready again, the change is accepted; the reconciler
			// flushes first.
			ready := setPhase(ctx, v, rcv1.VolumeReady)
			ready.Spec.WriteMode = rcv1.WriteThrough
			Expect(k8s.Update(ctx, ready)).To(Succeed(), "leave WriteBack on a Ready volume")
		})
	})

	// YAML users may write sizes as plain integers; the CEL rules that read
	// quantities must accept them too.
	It("reads integer quantities in its CEL rules", func(ctx context.Context) {
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
		create(ctx, u)
		u.Object["spec"].(map[string]any)["size"] = int64(1 << 29)
		Expect(k8s.Update(ctx, u)).To(MatchError(ContainSubstring("size cannot shrink")))
	})
})

// setPhase writes status.phase of v and returns the updated object.
func setPhase(ctx context.Context, v *rcv1.CachedVolume, phase rcv1.CachedVolumePhase) *rcv1.CachedVolume {
	GinkgoHelper()
	w := &rcv1.CachedVolume{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(v), w)).To(Succeed())
	w.Status.Phase = phase
	Expect(k8s.Status().Update(ctx, w)).To(Succeed(), "set status phase %s", phase)
	return w
}
