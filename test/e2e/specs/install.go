package specs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2" //nolint:revive,staticcheck // ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive,staticcheck // gomega's DSL reads best unqualified
	"sigs.k8s.io/yaml"
)

// CephSecret is the Secret (ceph-csi's shape: userID, userKey) the
// StorageClasses and the CachePool name.
const CephSecret = "ceph-csi-user"

// StorageClass is one StorageClass the chart creates for the specs.
type StorageClass struct {
	Name      string
	WriteMode string // WriteThrough, WriteBack
	CacheSize string
}

// InstallInput says how to install the chart.
type InstallInput struct {
	// CachePool names the pool the StorageClasses use.
	CachePool      string
	StorageClasses []StorageClass
	// VolumeSnapshotClass also creates the chart's VolumeSnapshotClass (the
	// cluster needs external-snapshotter's CRDs and controller).
	VolumeSnapshotClass bool
}

// InstallChart installs charts/rackcache with its defaults, the suite's
// values files (the cluster's networking) and the input's StorageClasses,
// the Ceph user's Secret first; it returns once helm has seen every
// Deployment and DaemonSet ready.
func InstallChart(ctx context.Context, env Env, in InstallInput) {
	c := env.Cluster
	cfg := c.Config
	By("creating namespace " + cfg.Namespace + " and the Ceph user's Secret")
	Expect(c.KubectlApply(ctx, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %s}
---
apiVersion: v1
kind: Secret
metadata: {name: %s, namespace: %s}
stringData: {userID: %q, userKey: %q}
`, cfg.Namespace, CephSecret, cfg.Namespace, cfg.Ceph.User, cfg.Ceph.Key))).To(Succeed())

	values := map[string]any{}
	var classes []map[string]any
	for _, sc := range in.StorageClasses {
		classes = append(classes, map[string]any{
			"name": sc.Name, "cachePool": in.CachePool, "pool": cfg.Ceph.Pool,
			"writeMode": sc.WriteMode, "cacheSize": sc.CacheSize, "fsType": "ext4",
			"secretName": CephSecret,
		})
	}
	values["storageClasses"] = classes
	// The cluster's cache device is a file on the cache-server node: the
	// operator admits it only when told to (the chart's default admits
	// NVMe devices alone).
	values["operator"] = map[string]any{
		"allowedDevicePrefixes": []string{"/dev/disk/by-id/", "/dev/nvme", cfg.CacheDevice},
	}
	if in.VolumeSnapshotClass {
		values["volumeSnapshotClass"] = map[string]any{"create": true, "secretName": CephSecret}
	}
	out, err := yaml.Marshal(values)
	Expect(err).NotTo(HaveOccurred())
	file := filepath.Join(GinkgoT().TempDir(), "e2e-values.yaml")
	Expect(os.WriteFile(file, out, 0o600)).To(Succeed())

	args := []string{"upgrade", "--install", cfg.Release, filepath.Join(cfg.RepoRoot, "charts", "rackcache"),
		"--namespace", cfg.Namespace, "--wait", "--timeout", installTimeout.String()}
	for _, f := range append(append([]string{}, cfg.ValuesFiles...), file) {
		args = append(args, "--values", f)
	}
	By("helm " + strings.Join(args[:3], " ") + " with the chart's defaults")
	out2, err := c.Helm(ctx, args...)
	if err != nil {
		reportPods(ctx, env, cfg.Namespace)
	}
	Expect(err).NotTo(HaveOccurred(), out2)
}

// UninstallChart removes the release and waits until its pods are gone.
func UninstallChart(ctx context.Context, env Env) {
	c := env.Cluster
	By("helm uninstall " + c.Config.Release)
	_, err := c.Helm(ctx, "uninstall", c.Config.Release, "--namespace", c.Config.Namespace, "--ignore-not-found", "--wait", "--timeout", goneTimeout.String())
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega) {
		out, err := c.Kubectl(ctx, "get", "pods", "-n", c.Config.Namespace, "-l", "app.kubernetes.io/part-of=rackcache", "-o", "name")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(strings.TrimSpace(out)).To(BeEmpty(), "rackcache pods left after uninstall")
	}).WithContext(ctx).WithTimeout(goneTimeout).WithPolling(poll).Should(Succeed())
}

// reportPods writes the namespace's pods, their state and recent logs to
// the report, to explain a failed wait.
func reportPods(ctx context.Context, env Env, namespace string) {
	out, _ := env.Cluster.Kubectl(ctx, "get", "pods", "-n", namespace, "-o", "wide")
	AddReportEntry("pods in "+namespace, out)
	names, _ := env.Cluster.Kubectl(ctx, "get", "pods", "-n", namespace, "-o", "name")
	for _, n := range strings.Fields(names) {
		name := strings.TrimPrefix(n, "pod/")
		AddReportEntry("logs of "+name, env.Cluster.PodLogs(ctx, namespace, name))
	}
	ev, _ := env.Cluster.Kubectl(ctx, "get", "events", "-n", namespace, "--sort-by=.lastTimestamp")
	AddReportEntry("events in "+namespace, ev)
}
