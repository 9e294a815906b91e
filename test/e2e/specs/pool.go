package specs

import (
	"context"
	"fmt"
	"net"
	"strings"

	. "github.com/onsi/ginkgo/v2" //nolint:revive,staticcheck // ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive,staticcheck // gomega's DSL reads best unqualified
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// metricsPort is the dataplanes' metrics port (controllers/servers).
const metricsPort = 9560

// PoolInput describes the CachePool a spec creates.
type PoolInput struct {
	Name string
	// Port is the cache servers' NVMe/TCP port (4420 when zero).
	Port int32
	// TLS is dataPath.tls: volumes only over NVMe/TCP's TLS, with a PSK
	// per host and volume (the cluster's guest node runs tlshd).
	TLS bool
}

// CreateCachePool creates a CachePool on the suite's cache-server nodes with
// the suite's cache device and Ceph cluster, and waits until it is Ready:
// its dataplane pods run and the operator reached every server.
func CreateCachePool(ctx context.Context, env Env, in PoolInput) *rcv1.CachePool {
	cfg := env.Cluster.Config
	port := in.Port
	if port == 0 {
		port = 4420
	}
	pool := map[string]any{
		"apiVersion": "rackcache.io/v1alpha1", "kind": "CachePool",
		"metadata": map[string]any{"name": in.Name},
		"spec": map[string]any{
			"nodeSelector": cfg.CacheNodeSelector,
			"devices":      []map[string]any{{"path": cfg.CacheDevice, "size": cfg.CacheDeviceSize}},
			"port":         port,
			"image":        cfg.DataplaneImage,
			"ceph": map[string]any{
				"monitors":  cfg.Ceph.Monitors,
				"secretRef": map[string]any{"name": CephSecret, "namespace": cfg.Namespace},
			},
			"resources": map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "256Mi"}},
			"dataPath":  map[string]any{"tls": in.TLS},
		},
	}
	manifest, err := yaml.Marshal(pool)
	Expect(err).NotTo(HaveOccurred())
	By("creating CachePool " + in.Name)
	Expect(env.Cluster.KubectlApply(ctx, string(manifest))).To(Succeed())

	return waitPoolReady(ctx, env, in.Name)
}

// waitPoolReady waits until the pool's Ready condition is true.
func waitPoolReady(ctx context.Context, env Env, name string) *rcv1.CachePool {
	got := &rcv1.CachePool{}
	Eventually(func(g Gomega) {
		g.Expect(env.Cluster.Client.Get(ctx, client.ObjectKey{Name: name}, got)).To(Succeed())
		ready := meta.FindStatusCondition(got.Status.Conditions, "Ready")
		g.Expect(ready).NotTo(BeNil(), "no Ready condition yet")
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "Ready: %s: %s", ready.Reason, ready.Message)
	}).WithContext(ctx).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed(), func() string {
		reportPods(ctx, env, env.Cluster.Config.Namespace)
		return "CachePool " + name + " did not become Ready"
	})
	return got
}

// DeleteCachePool deletes the pool and waits until it is gone.
func DeleteCachePool(ctx context.Context, env Env, name string) {
	By("deleting CachePool " + name)
	_, err := env.Cluster.Kubectl(ctx, "delete", "cachepool", name, "--ignore-not-found", "--wait", "--timeout", goneTimeout.String())
	Expect(err).NotTo(HaveOccurred())
}

// DataplaneMetrics reads the /metrics of the pool's dataplane pod on each
// cache server, keyed by pod name. It fetches them from inside the CSI
// controller's pod (its image has busybox's wget), where the cluster's
// network reaches every pod: no port on the test's machine is needed. It
// presents the operator's scrape token, as the ServiceMonitor does.
func DataplaneMetrics(ctx context.Context, g Gomega, env Env, pool string) map[string]string {
	cfg := env.Cluster.Config
	pods, err := env.Cluster.Kubectl(ctx, "get", "pods", "-n", cfg.Namespace, "-l", "rackcache.io/pool="+pool,
		"-o", `jsonpath={range .items[*]}{.metadata.name}{" "}{.status.podIP}{"\n"}{end}`)
	g.Expect(err).NotTo(HaveOccurred())
	from, err := env.Cluster.Kubectl(ctx, "get", "pods", "-n", cfg.Namespace, "-l", "app.kubernetes.io/name=rackcache-csi-controller",
		"-o", "jsonpath={.items[0].metadata.name}")
	g.Expect(err).NotTo(HaveOccurred())
	token := scrapeToken(ctx, g, env)
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(pods), "\n") {
		name, ip, ok := strings.Cut(line, " ")
		if !ok || ip == "" {
			continue
		}
		url := fmt.Sprintf("http://%s/metrics", net.JoinHostPort(ip, fmt.Sprint(metricsPort)))
		// The token goes in on stdin, so no command line or error shows it.
		script := `read -r t; exec busybox wget -q --header "Authorization: Bearer $t" -O - "$1"`
		body, err := env.Cluster.KubectlInput(ctx, token+"\n", "exec", "-i", "-n", cfg.Namespace, from, "-c", "csi-controller", "--",
			"busybox", "sh", "-c", script, "sh", url)
		g.Expect(err).NotTo(HaveOccurred())
		out[name] = body
	}
	g.Expect(out).NotTo(BeEmpty(), "no running dataplane pods of pool %s", pool)
	return out
}

// ExpectSubsystem checks that a dataplane exports the volume's subsystem,
// a host is connected to it, and the CSI node plugin of the pod's node
// lists it (`nvme list-subsys`), so that ExpectNoSubsystems's absence
// checks look for what is really there while a volume lives.
func ExpectSubsystem(ctx context.Context, env Env, pool string, v *Volume) {
	nqn := nqnPrefix + v.CachedVolume
	Expect(nodeSubsystems(ctx, env, v.Input.Namespace, v.Input.Name)).To(ContainSubstring(nqn),
		"the node plugin on the pod's node does not list %s", nqn)
	series := fmt.Sprintf(`rackcache_nvmf_connections{subnqn="%s"}`, nqn)
	found := false
	for _, body := range DataplaneMetrics(ctx, Default, env, pool) {
		for _, line := range strings.Split(body, "\n") {
			if value, ok := strings.CutPrefix(line, series+" "); ok && value != "0" {
				found = true
			}
		}
	}
	Expect(found).To(BeTrue(), "no dataplane reports a connection to %s (%s)", v.CachedVolume, series)
}

// ExpectNoSubsystems checks that no dataplane of the pool still exports a
// subsystem for any of the volumes (the per-subsystem metrics are gone) and
// that no node is still connected to one (`nvme list-subsys` in each CSI
// node plugin's pod).
func ExpectNoSubsystems(ctx context.Context, env Env, pool string, volumes []*Volume) {
	By("checking that no node is connected to, and no dataplane exports, a subsystem of the deleted volumes")
	cfg := env.Cluster.Config
	nodes, err := env.Cluster.Kubectl(ctx, "get", "pods", "-n", cfg.Namespace, "-l", "app.kubernetes.io/name=rackcache-csi-node",
		"-o", `jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}`)
	Expect(err).NotTo(HaveOccurred())
	Expect(strings.Fields(nodes)).NotTo(BeEmpty(), "no CSI node plugin pods")
	for _, pod := range strings.Fields(nodes) {
		subsys, err := env.Cluster.Kubectl(ctx, "exec", "-n", cfg.Namespace, pod, "-c", "csi-node", "--", "nvme", "list-subsys")
		Expect(err).NotTo(HaveOccurred())
		for _, v := range volumes {
			Expect(subsys).NotTo(ContainSubstring(nqnPrefix+v.CachedVolume), "node plugin %s is still connected to %s", pod, v.CachedVolume)
		}
	}
	Eventually(func(g Gomega) {
		for pod, body := range DataplaneMetrics(ctx, g, env, pool) {
			for _, v := range volumes {
				g.Expect(body).NotTo(ContainSubstring(nqnPrefix+v.CachedVolume), "dataplane %s still exports %s", pod, v.CachedVolume)
			}
		}
	}).WithContext(ctx).WithTimeout(goneTimeout).WithPolling(poll).Should(Succeed())
}

// nodeSubsystems is `nvme list-subsys` as the CSI node plugin on the node
// of a pod sees it.
func nodeSubsystems(ctx context.Context, env Env, namespace, pod string) string {
	return nodeExec(ctx, env, namespace, pod, "nvme", "list-subsys")
}

// nodeExec runs a command in the CSI node plugin on the node of a pod.
func nodeExec(ctx context.Context, env Env, namespace, pod string, cmd ...string) string {
	cfg := env.Cluster.Config
	node, err := env.Cluster.Kubectl(ctx, "get", "pod", "-n", namespace, pod, "-o", "jsonpath={.spec.nodeName}")
	Expect(err).NotTo(HaveOccurred())
	plugin, err := env.Cluster.Kubectl(ctx, "get", "pods", "-n", cfg.Namespace, "-l", "app.kubernetes.io/name=rackcache-csi-node",
		"--field-selector", "spec.nodeName="+node, "-o", "jsonpath={.items[0].metadata.name}")
	Expect(err).NotTo(HaveOccurred())
	out, err := env.Cluster.Kubectl(ctx, append([]string{"exec", "-n", cfg.Namespace, plugin, "-c", "csi-node", "--"}, cmd...)...)
	Expect(err).NotTo(HaveOccurred(), "%v: %s", cmd, out)
	return out
}
