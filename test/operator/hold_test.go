package operator

// The write-through hold the CSI driver puts around a snapshot of a
// write-back volume: with the hold's flush request answered, the
// dataplane runs the volume write-through (every acknowledged write is in
// Ceph, in order) while status.writeMode still says WriteBack; without the
// hold it runs write-back again.

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/cachedvolume"
	"github.com/rackcache/rackcache/test/framework/standin"
)

var _ = Describe("A write-through hold on a write-back CachedVolume", func() {
	It("runs the volume write-through on its server until the hold ends", func(ctx SpecContext) {
		pool := createPool(ctx, poolInput{Name: "hold", WriteMode: rcv1.WriteBack})
		srv := cluster.StartServer(ctx, standin.ServerInput{Pool: pool, Node: "hold-1", IP: "127.0.0.10", CacheMiB: 128})
		createVolume(ctx, volumeInput{Pool: pool, Name: "hold-vol", SizeMiB: 64})
		waitVolumeReady(ctx, "hold-vol")
		cached := cachedvolume.CachedBdevName("hold-vol")
		mode := func(g Gomega) string { return cachedBdevsOf(g, ctx, srv)[cached].WriteMode }
		Eventually(mode).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Equal("wb"))

		By("a hold with its flush request")
		const token = "snap-1"
		Eventually(func(g Gomega) {
			v := getVolume(g, ctx, "hold-vol")
			if v.Annotations == nil {
				v.Annotations = map[string]string{}
			}
			v.Annotations[rcv1.FlushRequestAnnotation] = token
			v.Annotations[rcv1.WriteThroughHoldAnnotation] = cachedvolume.HoldValue(token, time.Now().Add(10*time.Minute))
			g.Expect(k8s.Update(ctx, v)).To(Succeed())
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())
		Eventually(func(g Gomega) {
			v := getVolume(g, ctx, "hold-vol")
			g.Expect(v.Status.FlushedRequest).To(Equal(token))
			g.Expect(v.Status.WriteThroughHold).To(Equal(token))
			g.Expect(v.Status.WriteMode).To(Equal(rcv1.WriteBack), "the volume's own mode")
			g.Expect(mode(g)).To(Equal("wt"), "the dataplane runs it write-through once the request is answered")
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())

		By("the hold removed")
		Eventually(func(g Gomega) {
			v := getVolume(g, ctx, "hold-vol")
			delete(v.Annotations, rcv1.WriteThroughHoldAnnotation)
			g.Expect(k8s.Update(ctx, v)).To(Succeed())
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())
		Eventually(func(g Gomega) {
			v := getVolume(g, ctx, "hold-vol")
			g.Expect(v.Status.WriteThroughHold).To(BeEmpty())
			g.Expect(v.Status.WriteMode).To(Equal(rcv1.WriteBack))
			g.Expect(mode(g)).To(Equal("wb"))
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())
	})
})
