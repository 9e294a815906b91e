package operator

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/test/framework/standin"
)

// A pool with one cache server in each of two racks: rack-a's is small
// (64 MiB of cache), rack-b's larger (256 MiB), so a volume wanted in
// rack-a can find its rack full.
var _ = Describe("A CachePool with servers in two racks", Ordered, func() {
	const (
		poolName     = "duo"
		smallMiB     = 64
		largeMiB     = 256
		rackA, rackB = "rack-a", "rack-b"
	)
	var (
		pool     *rcv1.CachePool
		srvA     *standin.Server
		srvB     *standin.Server
		byNode   map[string]*standin.Server
		hostNQNs = []string{"nqn.2014-08.org.nvmexpress:uuid:7b0c3f7e-0d7e-4a38-9c43-2a0f3b5e1d11"}
	)

	BeforeAll(func(ctx SpecContext) {
		pool = createPool(ctx, poolInput{Name: poolName, AllowCrossRack: ptr.To(false)})
		srvA = cluster.StartServer(ctx, standin.ServerInput{Pool: pool, Node: "duo-a", IP: "127.0.0.2", Rack: rackA, CacheMiB: smallMiB})
		srvB = cluster.StartServer(ctx, standin.ServerInput{Pool: pool, Node: "duo-b", IP: "127.0.0.3", Rack: rackB, CacheMiB: largeMiB})
		cluster.SyncDaemonSetStatus(ctx, pool, 2)
		byNode = map[string]*standin.Server{srvA.In.Node: srvA, srvB.In.Node: srvB}
	})

	It("becomes Ready with the capacity the dataplanes report, per server and per rack", func(ctx SpecContext) {
		p := waitPoolReady(ctx, poolName, 2)
		Expect(p.Status.TotalServers).To(BeEquivalentTo(2))
		Expect(condition(p.Status.Conditions, rcv1.ConditionDegraded)).To(HaveField("Status", BeEquivalentTo("False")))
		Expect(condition(p.Status.Conditions, rcv1.ConditionProgressing)).To(HaveField("Status", BeEquivalentTo("False")))
		Expect(p.Status.Servers).To(HaveLen(2))
		var total int64
		perRack := map[string]int64{}
		for _, st := range p.Status.Servers {
			s, ok := byNode[st.NodeName]
			Expect(ok).To(BeTrue(), "status names server %s, not one of the pool's", st.NodeName)
			reported := s.CacheBytes(ctx)
			Expect(reported).To(BeEquivalentTo(int64(s.In.CacheMiB)<<20), "the dataplane on %s reports its cache file's size", st.NodeName)
			Expect(st.Ready).To(BeTrue(), "server %s: %s", st.NodeName, st.Message)
			Expect(st.Rack).To(Equal(s.In.Rack))
			Expect(st.Address).To(Equal(s.In.IP))
			Expect(st.Version).NotTo(BeEmpty())
			Expect(st.Capacity).NotTo(BeNil())
			Expect(st.Capacity.Value()).To(BeEquivalentTo(reported), "capacity of %s", st.NodeName)
			// One cache device per server here: it has all the capacity.
			Expect(st.Devices).To(HaveLen(1), "devices of %s", st.NodeName)
			Expect(st.Devices[0].Name).To(Equal("cache0"))
			Expect(st.Devices[0].Capacity.Value()).To(BeEquivalentTo(reported), "capacity of %s's cache0", st.NodeName)
			total += st.Capacity.Value()
			perRack[st.Rack] += st.Capacity.Value()
		}
		Expect(perRack).To(Equal(map[string]int64{rackA: smallMiB << 20, rackB: largeMiB << 20}))
		Expect(p.Status.Capacity).NotTo(BeNil())
		Expect(p.Status.Capacity.Value()).To(Equal(total))
	})

	It("exposes the pool's and each server's gauges in the manager's metrics registry", func(ctx SpecContext) {
		Eventually(func(g Gomega) {
			v, ok := gaugeValue(g, "rackcache_pool_capacity_bytes", map[string]string{"pool": poolName})
			g.Expect(ok).To(BeTrue(), "rackcache_pool_capacity_bytes{pool=%q}", poolName)
			g.Expect(v).To(BeEquivalentTo(int64(smallMiB+largeMiB) << 20))
			v, ok = gaugeValue(g, "rackcache_pool_servers_ready", map[string]string{"pool": poolName})
			g.Expect(ok).To(BeTrue())
			g.Expect(v).To(BeEquivalentTo(2))
			for _, s := range []*standin.Server{srvA, srvB} {
				labels := map[string]string{"pool": poolName, "node": s.In.Node, "rack": s.In.Rack}
				v, ok = gaugeValue(g, "rackcache_server_capacity_bytes", labels)
				g.Expect(ok).To(BeTrue(), "rackcache_server_capacity_bytes%v", labels)
				g.Expect(v).To(BeEquivalentTo(int64(s.In.CacheMiB) << 20))
			}
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())
	})

	It("places a volume wanted in rack B on rack B's server, and the dataplane serves it", func(ctx SpecContext) {
		vol := createVolume(ctx, volumeInput{Name: "duo-in-b", Pool: pool, SizeMiB: 64, CacheSize: "16Mi", Rack: rackB, AllowedHosts: hostNQNs})
		v := waitVolumeReady(ctx, vol.Name)
		Expect(v.Status.Server).To(Equal(srvB.In.Node))
		Expect(v.Status.Rack).To(Equal(rackB))
		Expect(v.Status.CrossRack).To(BeFalse())
		Expect(v.Status.Address).To(Equal(srvB.In.IP))
		Expect(v.Status.Port).To(BeEquivalentTo(nvmePort))
		Expect(v.Status.WriteMode).To(Equal(rcv1.WriteThrough))
		Expect(v.Status.CacheDevice).To(Equal("cache0"), "the device holding its cache")
		Expect(condition(v.Status.Conditions, rcv1.ConditionPlaced)).To(HaveField("Reason", rcv1.ReasonPlacedInRack))

		// The subsystem and its cached bdev, as SPDK's client sees them.
		Eventually(func(g Gomega) {
			b := expectServes(g, ctx, srvB, v.Status.NQN, hostNQNs, "wt")
			g.Expect(b.CacheSizeMiB).To(BeEquivalentTo(16))
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())
		// Rack A's server holds its mirror (the only other server).
		Eventually(func(g Gomega) {
			m := getVolume(g, ctx, vol.Name)
			g.Expect(m.Status.Mirror).To(Equal(srvA.In.Node))
			g.Expect(condition(m.Status.Conditions, rcv1.ConditionMirrored)).To(HaveField("Status", BeEquivalentTo("True")))
			g.Expect(m.Status.Paths).To(HaveLen(2))
			g.Expect(m.Status.Paths[1]).To(And(HaveField("Server", srvA.In.Node), HaveField("ANAState", "inaccessible")))
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())

		By("recording an Event on placement")
		Eventually(func(g Gomega) {
			var placed []string
			for _, e := range eventsFor(g, ctx, "CachedVolume", vol.Name) {
				if strings.Contains(e.Reason, "Placed") && strings.Contains(e.Message, srvB.In.Node) {
					placed = append(placed, e.Reason+": "+e.Message)
				}
			}
			g.Expect(placed).NotTo(BeEmpty(), "an Event on %s naming the server it was placed on", vol.Name)
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())

		By("exposing the volume's gauges and the pool's allocation")
		Eventually(func(g Gomega) {
			labels := map[string]string{"volume": vol.Name, "pool": poolName, "server": srvB.In.Node}
			v, ok := gaugeValue(g, "rackcache_volume_cache_size_bytes", labels)
			g.Expect(ok).To(BeTrue(), "rackcache_volume_cache_size_bytes%v", labels)
			g.Expect(v).To(BeEquivalentTo(16 << 20))
			g.Expect(seriesWithLabel(g, "rackcache_volume_", "volume", vol.Name)).To(ContainElements(
				"rackcache_volume_hit_ratio", "rackcache_volume_dirty_bytes"), "rackcache_volume_* series of %s", vol.Name)
			// The owner's cache on B and the mirror's on A.
			v, ok = gaugeValue(g, "rackcache_pool_allocated_bytes", map[string]string{"pool": poolName})
			g.Expect(ok).To(BeTrue())
			g.Expect(v).To(BeEquivalentTo(32 << 20))
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())
	})

	It("places a volume whose rack is full in the other rack only when the pool allows it", func(ctx SpecContext) {
		// 128 MiB of cache fits rack-b's 256 MiB, never rack-a's 64 MiB.
		vol := createVolume(ctx, volumeInput{Name: "duo-big-in-a", Pool: pool, SizeMiB: 256, CacheSize: "128Mi", Rack: rackA})

		By("staying Pending with NoCapacity while allowCrossRack is false")
		pending := func(g Gomega) {
			v := getVolume(g, ctx, vol.Name)
			g.Expect(v.Status.Phase).To(Equal(rcv1.VolumePending))
			g.Expect(v.Status.Server).To(BeEmpty())
			g.Expect(condition(v.Status.Conditions, rcv1.ConditionPlaced)).To(And(
				HaveField("Status", BeEquivalentTo("False")), HaveField("Reason", rcv1.ReasonNoCapacity)))
		}
		Eventually(pending).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())
		Consistently(pending).WithContext(ctx).WithTimeout(3 * statusInterval).WithPolling(poll).Should(Succeed())
		Consistently(func(g Gomega) {
			for _, s := range []*standin.Server{srvA, srvB} {
				g.Expect(cachedBdevsOf(g, ctx, s)).NotTo(ContainElement(HaveField("CacheSizeMiB", BeEquivalentTo(128))), "nothing of %s on %s", vol.Name, s.In.Node)
			}
		}).WithContext(ctx).WithTimeout(statusInterval).WithPolling(time.Second).Should(Succeed())

		By("falling back to rack B once the pool allows cross-rack placement")
		var p rcv1.CachePool
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pool), &p)).To(Succeed())
		before := p.DeepCopy()
		p.Spec.Placement.AllowCrossRack = ptr.To(true)
		Expect(k8s.Patch(ctx, &p, client.MergeFrom(before))).To(Succeed())

		v := waitVolumeReady(ctx, vol.Name)
		Expect(v.Status.Server).To(Equal(srvB.In.Node))
		Expect(v.Status.Rack).To(Equal(rackB))
		Expect(v.Status.CrossRack).To(BeTrue())
		Expect(condition(v.Status.Conditions, rcv1.ConditionPlaced)).To(HaveField("Reason", rcv1.ReasonPlacedCrossRack))
		Expect(v.Status.CacheSize).NotTo(BeNil())
		Expect(v.Status.CacheSize.Cmp(resource.MustParse("128Mi"))).To(Equal(0), "resolved cache size %s", v.Status.CacheSize)
		Eventually(func(g Gomega) {
			b := expectServes(g, ctx, srvB, v.Status.NQN, nil, "wt")
			g.Expect(b.CacheSizeMiB).To(BeEquivalentTo(128))
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())
	})
})
