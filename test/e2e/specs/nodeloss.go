package specs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2" //nolint:revive,staticcheck // ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive,staticcheck // gomega's DSL reads best unqualified
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// How long the operator may take to promote the mirror of a lost owner
// (the pool's failover grace, default 10 s, the fencing and a pass), and
// to make a returned server the mirror again (the node's kubelet and
// dataplane start, the copy is made anew and synced).
const (
	promoteTimeout = 2 * time.Minute
	returnTimeout  = 5 * time.Minute
)

// The writer's files in the volume's pod: /tmp/passes counts the passes
// done, /tmp/stop ends the loop.
const writerScript = `set -e
rm -f /tmp/stop /tmp/passes
dd if=/dev/urandom of=/tmp/src bs=1M count=%[1]d 2>/dev/null
# /proc/uptime in hundredths of a second: busybox's date may lack %%N.
now() { read -r up _ </proc/uptime; echo "${up%%.*}${up#*.}"; }
n=0; worst=0
while [ ! -e /tmp/stop ] && [ "$n" -lt 5000 ]; do
  t0=$(now)
  if ! dd if=/tmp/src of=%[2]s bs=1M count=%[1]d conv=notrunc,fsync 2>/tmp/dd.err; then
    echo "pass $n failed: $(cat /tmp/dd.err)"; exit 1
  fi
  t=$(( ($(now) - t0) * 10 )); [ "$t" -gt "$worst" ] && worst=$t
  n=$((n + 1)); echo "$n" >/tmp/passes
done
echo "passes=$n worst_ms=$worst md5=$(md5sum </tmp/src | cut -d' ' -f1)"`

// LoseOwnerNode is the node-loss story of a mirrored volume in use: a pod
// rewrites the volume's first mib MiB with fsync in a loop while the power
// of its owner's node is cut (RACKCACHE_E2E_NODE_STOP: kubelet, containerd
// and the dataplane killed). The mirror must be promoted (a new owner, a
// higher epoch) and every write must succeed; the data read back is the
// last pass's. Then the node is brought back and must become the volume's
// mirror again. It returns the md5 of what the volume now holds.
func LoseOwnerNode(ctx context.Context, env Env, pool string, v *Volume, mib int) string {
	cfg := env.Cluster.Config
	if len(cfg.NodeStop) == 0 || len(cfg.NodeStart) == 0 {
		if os.Getenv("CI") == "true" {
			Fail("RACKCACHE_E2E_NODE_STOP and RACKCACHE_E2E_NODE_START are not set (CI=true: nothing may skip)")
		}
		Skip("RACKCACHE_E2E_NODE_STOP and RACKCACHE_E2E_NODE_START are not set: no way to cut a node's power")
	}
	before := waitMirrored(ctx, env, v, "", promoteTimeout)
	owner, mirror := before.Status.Server, before.Status.Mirror
	Expect(operatorNodes(ctx, env)).NotTo(ContainElement(owner),
		"the operator runs on %s, the owner of %s: losing that node would test the operator's own failover, not the volume's", owner, v.CachedVolume)

	By(fmt.Sprintf("rewriting %d MiB of %s with fsync in a loop", mib, v.CachedVolume))
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := env.Cluster.Exec(ctx, v.Input.Namespace, v.Input.Name, fmt.Sprintf(writerScript, mib, v.target()))
		done <- result{strings.TrimSpace(out), err}
	}()
	waitPasses := func(atLeast int) {
		Eventually(func(g Gomega) {
			out, err := env.Cluster.Exec(ctx, v.Input.Namespace, v.Input.Name, "cat /tmp/passes 2>/dev/null || echo 0")
			g.Expect(err).NotTo(HaveOccurred(), out)
			n, err := strconv.Atoi(strings.TrimSpace(out))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(n).To(BeNumerically(">=", atLeast), "the writer's passes")
		}).WithContext(ctx).WithTimeout(promoteTimeout).WithPolling(time.Second).Should(Succeed())
	}
	waitPasses(2)

	By(fmt.Sprintf("cutting the power of %s, the owner of %s (mirror: %s)", owner, v.CachedVolume, mirror))
	lost := time.Now()
	runNodeCommand(ctx, cfg.NodeStop, owner)
	DeferCleanup(func(ctx context.Context) {
		// Whatever failed, the node comes back for the specs after this one.
		if ready, _ := env.Cluster.Kubectl(ctx, "get", "node", owner, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`); ready != "True" {
			runNodeCommand(ctx, cfg.NodeStart, owner)
		}
	})
	var promoted *rcv1.CachedVolume
	Eventually(func(g Gomega) {
		promoted = v.GetCachedVolume(ctx, env)
		g.Expect(promoted.Status.Server).To(Equal(mirror), "owner of %s", v.CachedVolume)
		g.Expect(promoted.Status.Epoch).To(BeNumerically(">", before.Status.Epoch), "epoch of %s", v.CachedVolume)
	}).WithContext(ctx).WithTimeout(promoteTimeout).WithPolling(time.Second).Should(Succeed())
	promotedAfter := time.Since(lost)
	By(fmt.Sprintf("%s promoted to owner of %s after %.1f s (epoch %d)", mirror, v.CachedVolume, promotedAfter.Seconds(), promoted.Status.Epoch))

	// A few passes on the new owner alone, then the writer stops.
	out, err := env.Cluster.Exec(ctx, v.Input.Namespace, v.Input.Name, "cat /tmp/passes")
	Expect(err).NotTo(HaveOccurred(), out)
	n, err := strconv.Atoi(strings.TrimSpace(out))
	Expect(err).NotTo(HaveOccurred())
	waitPasses(n + 2)
	_, err = env.Cluster.Exec(ctx, v.Input.Namespace, v.Input.Name, "touch /tmp/stop")
	Expect(err).NotTo(HaveOccurred())
	var r result
	Eventually(done).WithContext(ctx).WithTimeout(podTimeout).Should(Receive(&r))
	Expect(r.err).NotTo(HaveOccurred(), "the writer saw an I/O error through the loss of %s: %s", owner, r.out)
	fields := map[string]string{}
	for _, kv := range strings.Fields(r.out) {
		if k, val, ok := strings.Cut(kv, "="); ok {
			fields[k] = val
		}
	}
	Expect(fields).To(HaveKey("md5"), "the writer's report: %s", r.out)
	AddReportEntry("node loss of "+owner, fmt.Sprintf("promoted after %.1f s; writer: %s passes of %d MiB with fsync, 0 errors, the longest %s ms",
		promotedAfter.Seconds(), fields["passes"], mib, fields["worst_ms"]))
	ExpectReadBack(ctx, env, v, mib, fields["md5"])

	By("bringing " + owner + " back: it must become the mirror of " + v.CachedVolume)
	runNodeCommand(ctx, cfg.NodeStart, owner)
	back := waitMirrored(ctx, env, v, owner, returnTimeout)
	Expect(back.Status.Server).To(Equal(mirror), "the owner of %s changed again", v.CachedVolume)
	waitPoolReady(ctx, env, pool)
	ExpectReadBack(ctx, env, v, mib, fields["md5"])
	return fields["md5"]
}

// waitMirrored waits until the volume's Mirrored condition is true with a
// mirror (mirror, when not empty) and two paths, and returns it.
func waitMirrored(ctx context.Context, env Env, v *Volume, mirror string, timeout time.Duration) *rcv1.CachedVolume {
	var cv *rcv1.CachedVolume
	Eventually(func(g Gomega) {
		cv = v.GetCachedVolume(ctx, env)
		c := meta.FindStatusCondition(cv.Status.Conditions, rcv1.ConditionMirrored)
		g.Expect(c).NotTo(BeNil(), "%s has no Mirrored condition", v.CachedVolume)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "Mirrored: %s: %s", c.Reason, c.Message)
		g.Expect(cv.Status.Mirror).NotTo(BeEmpty())
		if mirror != "" {
			g.Expect(cv.Status.Mirror).To(Equal(mirror), "mirror of %s", v.CachedVolume)
		}
		g.Expect(cv.Status.Paths).To(HaveLen(2), "paths of %s", v.CachedVolume)
	}).WithContext(ctx).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	return cv
}

// operatorNodes are the nodes the operator's pods run on.
func operatorNodes(ctx context.Context, env Env) []string {
	out, err := env.Cluster.Kubectl(ctx, "get", "pods", "-n", env.Cluster.Config.Namespace,
		"-l", "app.kubernetes.io/name=rackcache-operator", "-o", `jsonpath={range .items[*]}{.spec.nodeName}{"\n"}{end}`)
	Expect(err).NotTo(HaveOccurred(), out)
	nodes := strings.Fields(out)
	Expect(nodes).NotTo(BeEmpty(), "no operator pods")
	return nodes
}

// runNodeCommand runs a node command of the suite's inputs for node.
func runNodeCommand(ctx context.Context, command []string, node string) {
	cmd := exec.CommandContext(ctx, command[0], append(command[1:], node)...)
	out, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "%s %s: %s", strings.Join(command, " "), node, out)
}
