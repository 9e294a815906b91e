package operator

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/test/framework/standin"
)

// Two servers in one rack; both volumes start on the first, the second
// becomes their mirror (the write-back one's holds every acknowledged
// write), then the first is lost (process killed, pod and Node not ready).
var _ = Describe("A lost cache server", func() {
	It("promotes the mirrors of its write-through and write-back volumes, and is their mirror again once it returns", func(ctx SpecContext) {
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
		nqns := map[string]string{wt.Name: waitVolumeReady(ctx, wt.Name).Status.NQN, wb.Name: waitVolumeReady(ctx, wb.Name).Status.NQN}
		modes := map[string]string{wt.Name: "wt", wb.Name: "wb"}
		for _, name := range []string{wt.Name, wb.Name} {
			Expect(getVolume(Default, ctx, name).Status.Server).To(Equal(first.In.Node), "volume %s", name)
		}

		second.SetPodReady(ctx, true)
		waitPoolReady(ctx, pool.Name, 2)

		By("mirroring both volumes on the second server once it is ready")
		Eventually(func(g Gomega) {
			for _, name := range []string{wt.Name, wb.Name} {
				v := getVolume(g, ctx, name)
				g.Expect(v.Status.Mirror).To(Equal(second.In.Node), "volume %s", name)
				g.Expect(condition(v.Status.Conditions, rcv1.ConditionMirrored)).To(HaveField("Status", BeEquivalentTo("True")), "volume %s", name)
			}
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())

		By("losing the first server")
		first.MarkLost(ctx)

		By("promoting both mirrors on the second server (epoch 2)")
		Eventually(func(g Gomega) {
			for _, name := range []string{wt.Name, wb.Name} {
				v := getVolume(g, ctx, name)
				g.Expect(v.Status.Server).To(Equal(second.In.Node), "volume %s", name)
				g.Expect(v.Status.Address).To(Equal(second.In.IP))
				g.Expect(v.Status.Phase).To(Equal(rcv1.VolumeReady), "%s phase; conditions %v", name, v.Status.Conditions)
				g.Expect(v.Status.Conditions).To(ContainElement(HaveField("Reason", rcv1.ReasonPromoted)), "a condition says its mirror was promoted")
				g.Expect(v.Status.Epoch).To(BeEquivalentTo(2))
				g.Expect(v.Status.NQN).To(Equal(nqns[name]), "the NQN derives from the volume, not the server")
				expectServes(g, ctx, second, nqns[name], nil, modes[name])
			}
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())
		for _, name := range []string{wt.Name, wb.Name} {
			Expect(getVolume(Default, ctx, name).Status.FormerServers).To(ConsistOf(first.In.Node), "volume %s", name)
		}

		By("making the returned server both volumes' mirror again, its stale objects gone first")
		// Its persisted configuration brought back the subsystems and
		// caches that missed every write since the move (the write-back
		// one's dirty data is the promoted owner's too, from an older
		// epoch): removed (it was a former server), then fresh mirrors made
		// there.
		first.Restart(ctx, false)
		first.SetNodeReady(ctx, true)
		Eventually(func(g Gomega) {
			for _, name := range []string{wt.Name, wb.Name} {
				v := getVolume(g, ctx, name)
				g.Expect(v.Status.FormerServers).To(BeEmpty(), "volume %s", name)
				g.Expect(v.Status.Mirror).To(Equal(first.In.Node), "volume %s", name)
				g.Expect(condition(v.Status.Conditions, rcv1.ConditionMirrored)).To(HaveField("Status", BeEquivalentTo("True")), "volume %s", name)
				g.Expect(eventsFor(g, ctx, "CachedVolume", name)).To(ContainElement(HaveField("Reason", "FormerServerCleaned")))
				expectServes(g, ctx, second, nqns[name], nil, modes[name])
			}
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())

		// The restarted dataplane stops when this spec ends, before the
		// clean-ups registered earlier: delete the volumes while it runs.
		By("deleting both volumes from their servers")
		deleteAndWait(ctx, wt)
		deleteAndWait(ctx, wb)
		Eventually(func(g Gomega) {
			for _, name := range []string{wt.Name, wb.Name} {
				expectNotServing(g, ctx, second, nqns[name])
				expectNotServing(g, ctx, first, nqns[name])
			}
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())
	})
})
