package operator

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/test/framework/standin"
)

// Two servers in one rack; both volumes start on the first, the second
// becomes the write-through volume's mirror, then the first is lost
// (process killed, pod and Node not ready).
var _ = Describe("A lost cache server", func() {
	It("promotes its write-through volume's mirror and degrades its write-back volume, which comes back with its server", func(ctx SpecContext) {
		pool := createPool(ctx, poolInput{Name: "lost"})
		first := cluster.StartServer(ctx, standin.ServerInput{Pool: pool, Node: "lost-1", IP: "127.0.0.6", Rack: "rack-l", CacheMiB: 128})
		// The second server is not ready yet: both volumes land on the
		// first. (It starts before the volumes exist so that it stops
		// after they are deleted: clean-ups run in reverse.)
		second := cluster.StartServer(ctx, standin.ServerInput{Pool: pool, Node: "lost-2", IP: "127.0.0.7", Rack: "rack-l", CacheMiB: 128, Unready: true})
		cluster.SyncDaemonSetStatus(ctx, pool, 2)
		waitPoolReady(ctx, pool.Name, 1)

		wt := createVolume(ctx, volumeInput{Name: "lost-wt", Pool: pool, SizeMiB: 64, CacheSize: "16Mi", WriteMode: rcv1.WriteThrough})
		wb := createVolume(ctx, volumeInput{Name: "lost-wb", Pool: pool, SizeMiB: 64, CacheSize: "16Mi", WriteMode: rcv1.WriteBack})
		wtNQN := waitVolumeReady(ctx, wt.Name).Status.NQN
		wbNQN := waitVolumeReady(ctx, wb.Name).Status.NQN
		for _, name := range []string{wt.Name, wb.Name} {
			Expect(getVolume(Default, ctx, name).Status.Server).To(Equal(first.In.Node), "volume %s", name)
		}

		second.SetPodReady(ctx, true)
		waitPoolReady(ctx, pool.Name, 2)

		By("mirroring the write-through volume on the second server once it is ready (not the write-back one)")
		Eventually(func(g Gomega) {
			v := getVolume(g, ctx, wt.Name)
			g.Expect(v.Status.Mirror).To(Equal(second.In.Node))
			g.Expect(condition(v.Status.Conditions, rcv1.ConditionMirrored)).To(HaveField("Status", BeEquivalentTo("True")))
			g.Expect(condition(getVolume(g, ctx, wb.Name).Status.Conditions, rcv1.ConditionMirrored)).To(
				HaveField("Reason", rcv1.ReasonWriteBackNotMirrored))
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())

		By("losing the first server")
		first.MarkLost(ctx)

		By("promoting the write-through volume's mirror on the second server (epoch 2)")
		Eventually(func(g Gomega) {
			v := getVolume(g, ctx, wt.Name)
			g.Expect(v.Status.Server).To(Equal(second.In.Node))
			g.Expect(v.Status.Address).To(Equal(second.In.IP))
			g.Expect(v.Status.Phase).To(Equal(rcv1.VolumeReady), "phase; conditions %v", v.Status.Conditions)
			g.Expect(v.Status.Conditions).To(ContainElement(HaveField("Reason", rcv1.ReasonPromoted)), "a condition says its mirror was promoted")
			g.Expect(v.Status.Epoch).To(BeEquivalentTo(2))
			g.Expect(v.Status.NQN).To(Equal(wtNQN), "the NQN derives from the volume, not the server")
			expectServes(g, ctx, second, wtNQN, nil, "wt")
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())

		By("degrading the write-back volume, never moving it")
		degraded := func(g Gomega) {
			v := getVolume(g, ctx, wb.Name)
			g.Expect(v.Status.Phase).To(Equal(rcv1.VolumeDegraded))
			g.Expect(v.Status.Server).To(Equal(first.In.Node))
			g.Expect(condition(v.Status.Conditions, rcv1.ConditionDegraded)).To(And(
				HaveField("Status", BeEquivalentTo("True")), HaveField("Reason", rcv1.ReasonDirtyDataOnLostServer)))
			expectNotServing(g, ctx, second, wbNQN)
		}
		Eventually(degraded).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())
		Consistently(degraded).WithContext(ctx).WithTimeout(holdPeriod).WithPolling(time.Second).Should(Succeed())

		Expect(getVolume(Default, ctx, wt.Name).Status.FormerServers).To(ConsistOf(first.In.Node))

		By("bringing the write-back volume back once its server returns")
		first.Restart(ctx, false)
		first.SetNodeReady(ctx, true)
		Eventually(func(g Gomega) {
			v := getVolume(g, ctx, wb.Name)
			g.Expect(v.Status.Phase).To(Equal(rcv1.VolumeReady), "phase; conditions %v", v.Status.Conditions)
			g.Expect(v.Status.Server).To(Equal(first.In.Node))
			g.Expect(condition(v.Status.Conditions, rcv1.ConditionDegraded)).To(HaveField("Status", BeEquivalentTo("False")))
			expectServes(g, ctx, first, wbNQN, nil, "wb")
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())

		By("making the returned server the write-through volume's mirror again, its stale objects gone first")
		// Its persisted configuration brought back the subsystem and a
		// cache that missed every write since the move: removed (it was a
		// former server), then a fresh mirror made there.
		Eventually(func(g Gomega) {
			v := getVolume(g, ctx, wt.Name)
			g.Expect(v.Status.FormerServers).To(BeEmpty())
			g.Expect(v.Status.Mirror).To(Equal(first.In.Node))
			g.Expect(condition(v.Status.Conditions, rcv1.ConditionMirrored)).To(HaveField("Status", BeEquivalentTo("True")))
			g.Expect(eventsFor(g, ctx, "CachedVolume", wt.Name)).To(ContainElement(HaveField("Reason", "FormerServerCleaned")))
			expectServes(g, ctx, second, wtNQN, nil, "wt")
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())

		// The restarted dataplane stops when this spec ends, before the
		// clean-ups registered earlier: delete the volumes while it runs.
		By("deleting both volumes from their servers")
		deleteAndWait(ctx, wt)
		deleteAndWait(ctx, wb)
		Eventually(func(g Gomega) {
			expectNotServing(g, ctx, second, wtNQN)
			expectNotServing(g, ctx, first, wbNQN)
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())
	})
})
