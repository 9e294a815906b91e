package specs

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2" //nolint:revive,staticcheck // ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive,staticcheck // gomega's DSL reads best unqualified
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CrashDataplanes kills every process of the pool's dataplane containers
// with SIGKILL (a crash: nothing is flushed, drained or closed on the way
// out), from a privileged pod in the host's PID namespace on each cache
// server, and waits until the restarted containers serve again (restart
// count up, the pool Ready).
func CrashDataplanes(ctx context.Context, env Env, pool string) {
	cfg := env.Cluster.Config
	var pods corev1.PodList
	Expect(env.Cluster.Client.List(ctx, &pods, client.InNamespace(cfg.Namespace), client.MatchingLabels{"rackcache.io/pool": pool})).To(Succeed())
	Expect(pods.Items).NotTo(BeEmpty(), "no dataplane pods of pool %s", pool)
	restarts := map[string]int32{}
	for _, p := range pods.Items {
		Expect(p.Status.ContainerStatuses).To(HaveLen(1), "dataplane pod %s", p.Name)
		cs := p.Status.ContainerStatuses[0]
		_, id, ok := strings.Cut(cs.ContainerID, "://")
		Expect(ok).To(BeTrue(), "container id %q", cs.ContainerID)
		restarts[p.Name] = cs.RestartCount
		By(fmt.Sprintf("SIGKILL of dataplane %s (container %.12s) on %s", p.Name, id, p.Spec.NodeName))
		runKiller(ctx, env, p.Spec.NodeName, id)
	}
	Eventually(func(g Gomega) {
		for name, before := range restarts {
			p := &corev1.Pod{}
			g.Expect(env.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: cfg.Namespace, Name: name}, p)).To(Succeed())
			cs := p.Status.ContainerStatuses[0]
			g.Expect(cs.RestartCount).To(BeNumerically(">", before), "%s not restarted yet", name)
			g.Expect(cs.Ready).To(BeTrue(), "%s not ready yet", name)
		}
	}).WithContext(ctx).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
	waitPoolReady(ctx, env, pool)
}

// runKiller runs a one-shot pod on node that sends SIGKILL to every process
// whose cgroup names the container, and waits until it has succeeded.
func runKiller(ctx context.Context, env Env, node, containerID string) {
	cfg := env.Cluster.Config
	script := fmt.Sprintf(`n=0
for d in /proc/[0-9]*; do
  if grep -q %q "$d/cgroup" 2>/dev/null; then kill -9 "${d#/proc/}" && n=$((n + 1)); fi
done
echo "killed $n"
[ "$n" -gt 0 ]`, containerID)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "dataplane-killer-", Namespace: cfg.Namespace},
		Spec: corev1.PodSpec{
			NodeName:      node,
			HostPID:       true,
			RestartPolicy: corev1.RestartPolicyNever,
			DNSPolicy:     corev1.DNSDefault,
			Tolerations:   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "kill", Image: cfg.WorkloadImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"sh", "-c", script},
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
			}},
		},
	}
	Expect(env.Cluster.Client.Create(ctx, pod)).To(Succeed())
	defer func() { _ = env.Cluster.Client.Delete(context.WithoutCancel(ctx), pod) }()
	Eventually(func(g Gomega) {
		phase, why, err := env.Cluster.PodPhase(ctx, pod.Namespace, pod.Name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(phase).NotTo(Equal(corev1.PodFailed), "killer pod failed: %s %s", why, env.Cluster.PodLogs(ctx, pod.Namespace, pod.Name))
		g.Expect(phase).To(Equal(corev1.PodSucceeded), why)
	}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(time.Second).Should(Succeed())
}

// DirtyBytes is what the pool's dataplanes report right now as the volume's
// dirty bytes (rackcache_cache_dirty_bytes, read from the dataplanes, not
// the operator's periodic copy in the CachedVolume's status).
func DirtyBytes(ctx context.Context, g Gomega, env Env, pool string, v *Volume) int64 {
	series := regexp.MustCompile(`^rackcache_cache_dirty_bytes\{[^}]*volume="[^"]*` + regexp.QuoteMeta(v.CachedVolume) + `"[^}]*\} (\S+)$`)
	var total int64
	found := false
	for _, body := range DataplaneMetrics(ctx, g, env, pool) {
		for _, line := range strings.Split(body, "\n") {
			if m := series.FindStringSubmatch(line); m != nil {
				f, err := strconv.ParseFloat(m[1], 64)
				g.Expect(err).NotTo(HaveOccurred())
				total += int64(f)
				found = true
			}
		}
	}
	g.Expect(found).To(BeTrue(), "no dataplane reports rackcache_cache_dirty_bytes of %s", v.CachedVolume)
	return total
}

// ExpectDirty checks that the write-back volume holds data not yet in Ceph
// (so that a crash now tests what it should).
func ExpectDirty(ctx context.Context, env Env, pool string, v *Volume) {
	n := DirtyBytes(ctx, Default, env, pool, v)
	Expect(n).To(BeNumerically(">", 0), "%s has no dirty data: the crash would test nothing", v.CachedVolume)
	By(fmt.Sprintf("%s holds %d dirty bytes", v.CachedVolume, n))
}

// WaitClean waits until the dataplane reports no dirty data for the volume
// (write-back: everything written to Ceph).
func WaitClean(ctx context.Context, env Env, pool string, v *Volume) {
	By("waiting until " + v.CachedVolume + " has no dirty data")
	Eventually(func(g Gomega) {
		g.Expect(DirtyBytes(ctx, g, env, pool, v)).To(BeZero())
	}).WithContext(ctx).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
}
