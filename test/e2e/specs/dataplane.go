package specs

import (
	"context"
	"strings"

	. "github.com/onsi/ginkgo/v2" //nolint:revive,staticcheck // ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive,staticcheck // gomega's DSL reads best unqualified
	"k8s.io/apimachinery/pkg/api/resource"
)

// KillDataplanes kills the pool's dataplane pods at once (no grace period:
// nothing is flushed or drained on the way out) and waits until their
// replacements serve again (the pool Ready).
func KillDataplanes(ctx context.Context, env Env, pool string) {
	cfg := env.Cluster.Config
	before, err := env.Cluster.Kubectl(ctx, "get", "pods", "-n", cfg.Namespace, "-l", "rackcache.io/pool="+pool, "-o", "name")
	Expect(err).NotTo(HaveOccurred())
	Expect(strings.Fields(before)).NotTo(BeEmpty(), "no dataplane pods of pool %s", pool)
	By("killing the dataplane pods " + strings.Join(strings.Fields(before), ", "))
	_, err = env.Cluster.Kubectl(ctx, append([]string{"delete", "-n", cfg.Namespace, "--grace-period=0", "--force", "--wait=false"},
		strings.Fields(before)...)...)
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega) {
		out, err := env.Cluster.Kubectl(ctx, "get", "pods", "-n", cfg.Namespace, "-l", "rackcache.io/pool="+pool,
			"-o", `jsonpath={range .items[*]}{.metadata.name}={.status.phase}{"\n"}{end}`)
		g.Expect(err).NotTo(HaveOccurred())
		for _, old := range strings.Fields(before) {
			g.Expect(out).NotTo(ContainSubstring(strings.TrimPrefix(old, "pod/")+"="), "the killed pod is still there")
		}
		g.Expect(out).To(ContainSubstring("=Running"), "no replacement running yet")
	}).WithContext(ctx).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
	waitPoolReady(ctx, env, pool)
}

// WaitClean waits until the volume has no dirty data left (write-back: the
// cache server has written everything to Ceph).
func WaitClean(ctx context.Context, env Env, v *Volume) {
	By("waiting until " + v.CachedVolume + " has no dirty data")
	Eventually(func(g Gomega) {
		cv := v.GetCachedVolume(ctx, env)
		g.Expect(cv.Status.Stats).NotTo(BeNil())
		dirty := cv.Status.Stats.Dirty
		g.Expect(dirty).NotTo(BeNil(), "dirty not reported yet")
		g.Expect(dirty.Cmp(resource.MustParse("0"))).To(Equal(0), "dirty: %s", dirty.String())
	}).WithContext(ctx).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
}
