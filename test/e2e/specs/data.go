package specs

import (
	"context"
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2" //nolint:revive,staticcheck // ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive,staticcheck // gomega's DSL reads best unqualified
)

// dataFile is where WriteAndVerify writes on a mounted volume.
const dataFile = mountPath + "/e2e.bin"

// target is the file or device the volume's data goes to in the pod.
func (v *Volume) target() string {
	if v.Input.Block {
		return devicePath
	}
	return dataFile
}

// WriteAndVerify writes mib MiB of random data into the volume from its
// pod, flushes it (fsync), drops the node's page cache and reads it back
// twice, so that the reads go to the cache server; it returns the data's
// md5, which every read must match.
func WriteAndVerify(ctx context.Context, env Env, v *Volume, mib int) string {
	By(fmt.Sprintf("writing %d MiB into %s and reading it back", mib, v.target()))
	script := fmt.Sprintf(`set -e
dd if=/dev/urandom of=/tmp/src bs=1M count=%[1]d 2>/dev/null
dd if=/tmp/src of=%[2]s bs=1M count=%[1]d conv=fsync 2>/dev/null
sync
md5sum </tmp/src | cut -d' ' -f1
rm /tmp/src
for i in 1 2; do
  echo 3 >/proc/sys/vm/drop_caches
  dd if=%[2]s bs=1M count=%[1]d 2>/dev/null | md5sum | cut -d' ' -f1
done`, mib, v.target())
	lines := strings.Fields(v.Sh(ctx, env, script))
	Expect(lines).To(HaveLen(3), "want the written md5 and two reads")
	Expect(lines[1]).To(Equal(lines[0]), "first read back differs from what was written")
	Expect(lines[2]).To(Equal(lines[0]), "second read back differs from what was written")
	return lines[0]
}

// ExpectReadBack reads mib MiB from the volume again (page cache dropped)
// and expects the md5 a WriteAndVerify returned.
func ExpectReadBack(ctx context.Context, env Env, v *Volume, mib int, want string) {
	got := v.Sh(ctx, env, fmt.Sprintf(`echo 3 >/proc/sys/vm/drop_caches
dd if=%s bs=1M count=%d 2>/dev/null | md5sum | cut -d' ' -f1`, v.target(), mib))
	Expect(got).To(Equal(want), "data read back from %s differs from what was written", v.target())
}

// ExpectHitRatio waits until the operator has read the volume's statistics
// from its cache server (reads seen, a hit ratio) and `kubectl get
// cachedvolumes` shows the ratio; it returns the ratio.
func ExpectHitRatio(ctx context.Context, env Env, v *Volume) string {
	By("waiting for the hit ratio of " + v.CachedVolume)
	var ratio string
	Eventually(func(g Gomega) {
		cv := v.GetCachedVolume(ctx, env)
		g.Expect(cv.Status.Stats).NotTo(BeNil(), "no statistics yet")
		g.Expect(cv.Status.Stats.ReadBytes).To(BeNumerically(">", 0), "no reads counted yet")
		g.Expect(cv.Status.Stats.HitRatio).NotTo(BeEmpty())
		ratio = cv.Status.Stats.HitRatio
	}).WithContext(ctx).WithTimeout(statsTimeout).WithPolling(poll).Should(Succeed())
	out, err := env.Cluster.Kubectl(ctx, "get", "cachedvolumes", v.CachedVolume)
	Expect(err).NotTo(HaveOccurred())
	Expect(out).To(ContainSubstring("HIT RATIO"))
	Expect(out).To(ContainSubstring(ratio), "kubectl get cachedvolumes does not show the hit ratio:\n%s", out)
	AddReportEntry("kubectl get cachedvolumes "+v.CachedVolume, out)
	return ratio
}

// ExpectCephHolds checks Ceph's own copy of a block volume: the first mib
// MiB of its RBD image, read with `rbd export`, have the given md5.
func ExpectCephHolds(ctx context.Context, env Env, v *Volume, mib int, want string) {
	By("reading Ceph's own copy of " + v.CachedVolume)
	got, err := env.Ceph.MD5(ctx, v.CachedVolume, int64(mib)<<20)
	Expect(err).NotTo(HaveOccurred())
	Expect(got).To(Equal(want), "Ceph's copy of %s differs from what the pod wrote", v.CachedVolume)
}
