package api

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// poolRejects is an Entry of the CachePool rejection table; want is also
// recorded so that the rules spec can tell which CEL rule has no entry.
func poolRejects(name string, mutate func(*rcv1.CachePool), want string) TableEntry {
	testedMessages["CachePool"] = append(testedMessages["CachePool"], want)
	return Entry(name, name, mutate, want)
}

var _ = Describe("CachePool", func() {
	It("is accepted with the documented defaults", func(ctx context.Context) {
		pool := validPool("defaults")
		create(ctx, pool)
		got := &rcv1.CachePool{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pool), got)).To(Succeed())
		s := got.Spec
		Expect(s.BlockSizesKiB).To(Equal([]rcv1.BlockSizeKiB{32, 64, 128, 256}))
		Expect(s.AllocationMode).To(Equal(rcv1.Adaptive))
		Expect(s.WriteMode).To(Equal(rcv1.WriteThrough))
		Expect(s.Port).To(BeEquivalentTo(4420))
		Expect(s.Placement.RackLabel).To(Equal(rcv1.DefaultRackLabel))
		Expect(s.Placement.AllowCrossRack).To(Equal(ptr.To(true)))
		// Hosts authenticate unless the pool says None.
		Expect(s.DataPath.Authentication).To(Equal(rcv1.HostAuthenticationDHHMACCHAP))
		Expect(s.DataPath.KeyRotationInterval).To(Equal(&metav1.Duration{Duration: 720 * time.Hour}))
	})

	It("accepts a fixed-size write-back pool in front of Rook with every policy set", func(ctx context.Context) {
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
		create(ctx, rook)
	})

	// Every spelling the dataplane's parse_eviction takes must pass the
	// CRD's rule, or a policy the servers run could not be asked for.
	DescribeTable("accepts each eviction policy the dataplane parses",
		func(ctx context.Context, eviction string) {
			p := validPool("eviction-" + objectNamePart(eviction))
			p.Spec.Policies.Eviction = eviction
			create(ctx, p)
		},
		Entry(nil, "auto"),
		Entry(nil, "auto:s3fifo+lru2"),
		Entry(nil, "auto:arc"),
		Entry(nil, "auto:lru2+s3fifo+sieve+arc+wtinylfu"),
		Entry(nil, "lru2"),
		Entry(nil, "lazy"),
		Entry(nil, "lazy:4"),
		Entry(nil, "lazy:4:2"),
		Entry(nil, "s3fifo"),
		Entry(nil, "sieve"),
		Entry(nil, "arc"),
		Entry(nil, "wtinylfu"),
	)

	// Every busy-poll value the CRD takes must parse in the dataplane
	// (--busy-poll: off, on, or a window of at most 1s).
	DescribeTable("accepts busy-poll modes the dataplane parses",
		func(ctx context.Context, mode string) {
			p := validPool("busypoll-" + objectNamePart(mode))
			p.Spec.BusyPoll = mode
			create(ctx, p)
		},
		Entry(nil, "off"),
		Entry(nil, "on"),
		Entry(nil, "50us"),
		Entry(nil, "999999us"),
		Entry(nil, "2ms"),
		Entry(nil, "1000ms"),
	)

	DescribeTable("the apiserver rejects a violating pool with the rule's message",
		func(ctx context.Context, name string, mutate func(*rcv1.CachePool), want string) {
			p := validPool("bad-" + strings.ReplaceAll(strings.ToLower(name), " ", "-"))
			mutate(p)
			expectCreateRejected(ctx, p, want)
		},
		poolRejects("data path network not a CIDR", func(p *rcv1.CachePool) { p.Spec.DataPath.Network = "10.20.0.0" },
			"dataPath.network must be a CIDR"),
		poolRejects("data path network and interface", func(p *rcv1.CachePool) {
			p.Spec.DataPath.Network, p.Spec.DataPath.Interface = "10.20.0.0/16", "eth1"
		}, "set at most one of dataPath.network"),
		poolRejects("data path interface not a name", func(p *rcv1.CachePool) { p.Spec.DataPath.Interface = "eth1; reboot" },
			"spec.dataPath.interface"),
		poolRejects("unknown host authentication", func(p *rcv1.CachePool) { p.Spec.DataPath.Authentication = "NQN" },
			`Unsupported value: "NQN"`),
		poolRejects("TLS without host authentication", func(p *rcv1.CachePool) {
			p.Spec.DataPath.TLS, p.Spec.DataPath.Authentication = true, rcv1.HostAuthenticationNone
		}, "dataPath.tls needs authentication DHHMACCHAP"),
		poolRejects("block size not a power of two", func(p *rcv1.CachePool) { p.Spec.BlockSizesKiB = []rcv1.BlockSizeKiB{32, 48} },
			"block sizes are in KiB and must be a power of two from 4 (4 KiB) to 1024 (1 MiB)"),
		poolRejects("block size below 4 KiB", func(p *rcv1.CachePool) { p.Spec.BlockSizesKiB = []rcv1.BlockSizeKiB{2} },
			"must be a power of two from 4 (4 KiB) to 1024 (1 MiB)"),
		poolRejects("block size above 1 MiB", func(p *rcv1.CachePool) { p.Spec.BlockSizesKiB = []rcv1.BlockSizeKiB{2048} },
			"must be a power of two from 4 (4 KiB) to 1024 (1 MiB)"),
		poolRejects("block sizes descending", func(p *rcv1.CachePool) { p.Spec.BlockSizesKiB = []rcv1.BlockSizeKiB{64, 32} },
			"blockSizesKiB must be in ascending order"),
		poolRejects("block sizes repeated", func(p *rcv1.CachePool) { p.Spec.BlockSizesKiB = []rcv1.BlockSizeKiB{32, 32, 64} },
			"blockSizesKiB must not repeat a size"),
		poolRejects("fixed with two sizes", func(p *rcv1.CachePool) {
			p.Spec.AllocationMode = rcv1.Fixed
			p.Spec.BlockSizesKiB = []rcv1.BlockSizeKiB{32, 64}
		}, "allocationMode Fixed uses exactly one block size"),
		poolRejects("fill size Locality with Fixed", func(p *rcv1.CachePool) {
			p.Spec.AllocationMode = rcv1.Fixed
			p.Spec.BlockSizesKiB = []rcv1.BlockSizeKiB{4}
			p.Spec.FillSize = rcv1.FillSizeLocality
		}, "fillSize Locality needs allocationMode Adaptive"),
		poolRejects("unknown fill size", func(p *rcv1.CachePool) { p.Spec.FillSize = "Largest" },
			"Unsupported value"),
		poolRejects("relative device path", func(p *rcv1.CachePool) { p.Spec.Devices[0].Path = "dev/nvme1n1" },
			"device path must be absolute"),
		poolRejects("device path with ..", func(p *rcv1.CachePool) { p.Spec.Devices[0].Path = "/dev/../etc/passwd" },
			"device path must be absolute (start with /) and must not contain .."),
		poolRejects("zero device size", func(p *rcv1.CachePool) { p.Spec.Devices[0].Size = ptr.To(resource.MustParse("0")) },
			"device size must be a positive byte quantity"),
		poolRejects("both rook and monitors", func(p *rcv1.CachePool) { p.Spec.Ceph.Rook = &rcv1.RookBackend{Namespace: "rook-ceph"} },
			"set exactly one of ceph.rook"),
		poolRejects("neither rook nor monitors", func(p *rcv1.CachePool) { p.Spec.Ceph = rcv1.CephBackend{} },
			"set exactly one of ceph.rook"),
		poolRejects("monitors without secret", func(p *rcv1.CachePool) { p.Spec.Ceph.SecretRef = nil },
			"ceph.monitors needs ceph.secretRef"),
		poolRejects("rook with secret", func(p *rcv1.CachePool) {
			p.Spec.Ceph.Monitors = nil
			p.Spec.Ceph.Rook = &rcv1.RookBackend{Namespace: "rook-ceph"}
		}, "ceph.secretRef is not used with ceph.rook"),
		poolRejects("monitor without port", func(p *rcv1.CachePool) { p.Spec.Ceph.Monitors = []string{"10.0.0.1"} },
			"each monitor must be host:port or [ipv6]:port"),
		poolRejects("bad admission", func(p *rcv1.CachePool) { p.Spec.Policies.Admission = "nhit:0" },
			"admission must be one of always, nhit, nhit:N"),
		poolRejects("bad eviction", func(p *rcv1.CachePool) { p.Spec.Policies.Eviction = "lru" },
			"eviction must be auto, auto:P+P..."),
		poolRejects("eviction lfu", func(p *rcv1.CachePool) { p.Spec.Policies.Eviction = "lfu" },
			"eviction must be auto"),
		poolRejects("eviction auto among lazy", func(p *rcv1.CachePool) { p.Spec.Policies.Eviction = "auto:lazy" },
			"eviction must be auto"),
		poolRejects("eviction auto without candidates", func(p *rcv1.CachePool) { p.Spec.Policies.Eviction = "auto:" },
			"eviction must be auto"),
		poolRejects("eviction auto among auto", func(p *rcv1.CachePool) { p.Spec.Policies.Eviction = "auto:arc+auto" },
			"eviction must be auto"),
		poolRejects("eviction auto with a trailing plus", func(p *rcv1.CachePool) { p.Spec.Policies.Eviction = "auto:arc+" },
			"eviction must be auto"),
		poolRejects("eviction too long", func(p *rcv1.CachePool) { p.Spec.Policies.Eviction = "auto:" + strings.Repeat("lru2+", 12) + "lru2" },
			"may not be more than 64"),
		poolRejects("eviction arc with a parameter", func(p *rcv1.CachePool) { p.Spec.Policies.Eviction = "arc:1" },
			"eviction must be auto"),
		poolRejects("lazy fields on aggressive cleaning", func(p *rcv1.CachePool) {
			p.Spec.Policies.Cleaning = &rcv1.Cleaning{Policy: rcv1.CleaningAggressive, StalenessMs: ptr.To[int32](5)}
		}, "stalenessMs, maxBatch and activityThresholdMs apply only to policy Lazy"),
		poolRejects("aggressive fields on lazy cleaning", func(p *rcv1.CachePool) {
			p.Spec.Policies.Cleaning = &rcv1.Cleaning{Policy: rcv1.CleaningLazy, DirtyRatioPercent: ptr.To[int32](50)}
		}, "dirtyRatioPercent and batchBlocks apply only to policy Aggressive"),
		poolRejects("wake-up on nop cleaning", func(p *rcv1.CachePool) {
			p.Spec.Policies.Cleaning = &rcv1.Cleaning{Policy: rcv1.CleaningNop, WakeUpMs: ptr.To[int32](5)}
		}, "wakeUpMs does not apply to policy Nop"),
		poolRejects("busy-poll window in seconds", func(p *rcv1.CachePool) { p.Spec.BusyPoll = "1s" },
			"spec.busyPoll in body should match"),
		poolRejects("busy-poll window over a second", func(p *rcv1.CachePool) { p.Spec.BusyPoll = "1001ms" },
			"spec.busyPoll in body should match"),
		poolRejects("busy-poll window of zero", func(p *rcv1.CachePool) { p.Spec.BusyPoll = "0us" },
			"spec.busyPoll in body should match"),
		poolRejects("unknown write mode", func(p *rcv1.CachePool) { p.Spec.WriteMode = "wb" },
			`Unsupported value: "wb"`),
		poolRejects("port out of range", func(p *rcv1.CachePool) { p.Spec.Port = 70000 },
			"should be less than or equal to 65535"),
		poolRejects("duplicate device", func(p *rcv1.CachePool) {
			p.Spec.Devices = append(p.Spec.Devices, rcv1.CacheDevice{Path: "/dev/nvme1n1"})
		}, "Duplicate value"),
		poolRejects("empty node selector", func(p *rcv1.CachePool) { p.Spec.NodeSelector = map[string]string{} },
			"spec.nodeSelector"),
	)

	const tlsFixed = "dataPath.tls cannot change"
	testedMessages["CachePool"] = append(testedMessages["CachePool"], tlsFixed)
	It("keeps dataPath.tls as the pool was made: every volume of a server shares its listener", func(ctx context.Context) {
		p := validPool("tls-fixed")
		p.Spec.DataPath.TLS = true
		create(ctx, p)
		w := &rcv1.CachePool{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), w)).To(Succeed())
		w.Spec.DataPath.TLS = false
		Expect(k8s.Update(ctx, w)).To(MatchError(ContainSubstring(tlsFixed)))
		// Other data-path settings still change.
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), w)).To(Succeed())
		w.Spec.DataPath.Interface = "eth1"
		Expect(k8s.Update(ctx, w)).To(Succeed())
	})
})
