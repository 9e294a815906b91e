package operator

// A cache device path that points at a disk holding something else (here a
// real ext4 filesystem, as a typo in spec.devices[].path would) is never
// formatted by a volume landing on it: the volume reports what libblkid
// found and how to wipe, the filesystem stays; wipe: true on the pool's
// device is the explicit way, and then the volume comes up.

import (
	"bytes"
	"os"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/test/framework/standin"
)

// ext4 keeps its magic 0xEF53 at byte 1080 (superblock at 1024, s_magic at 56).
func hasExt4Magic(file string) bool {
	GinkgoHelper()
	f, err := os.Open(file)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = f.Close() }()
	magic := make([]byte, 2)
	_, err = f.ReadAt(magic, 1080)
	Expect(err).NotTo(HaveOccurred())
	return bytes.Equal(magic, []byte{0x53, 0xef})
}

var _ = Describe("A cache device that is not blank", func() {
	It("is refused with the signature named until the pool says wipe: true", func(ctx SpecContext) {
		pool := createPool(ctx, poolInput{Name: "notblank"})
		srv := cluster.StartServer(ctx, standin.ServerInput{Pool: pool, Node: "notblank-1", IP: "127.0.0.9", CacheMiB: 128, CacheFS: "ext4"})
		Expect(hasExt4Magic(srv.CacheFile())).To(BeTrue(), "mkfs.ext4 made a filesystem")
		createVolume(ctx, volumeInput{Pool: pool, Name: "notblank-vol", SizeMiB: 64})

		By("the volume reports the filesystem and the way to wipe; the filesystem stays")
		Eventually(func(g Gomega) {
			vol := getVolume(g, ctx, "notblank-vol")
			ready := meta.FindStatusCondition(vol.Status.Conditions, rcv1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready.Message).To(And(ContainSubstring("ext4"), ContainSubstring("wipe: true")))
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())
		Expect(hasExt4Magic(srv.CacheFile())).To(BeTrue(), "the refusal wrote nothing")

		By("wipe: true on the pool's device formats it, and the volume comes up")
		Eventually(func(g Gomega) {
			p := getPool(g, ctx, pool.Name)
			p.Spec.Devices[0].Wipe = true
			g.Expect(k8s.Update(ctx, p)).To(Succeed())
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())
		waitVolumeReady(ctx, "notblank-vol")
		Expect(hasExt4Magic(srv.CacheFile())).To(BeFalse(), "the device was formatted")
	})
})
