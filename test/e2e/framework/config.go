// Package framework is what rackcache's e2e specs (test/e2e/specs) stand
// on: the suite's inputs, clients of the cluster under test, helm and
// kubectl, waits and the Ceph checks. It assumes nothing about the cluster
// beyond its KUBECONFIG and the inputs below, so the specs run against any
// cluster: hack/cluster.sh's local one, or a user's.
package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	testframework "github.com/rackcache/rackcache/test/framework"
)

// Config holds the suite's inputs, read from the environment (the names in
// the field comments). hack/e2e.sh sets them for the local cluster.
type Config struct {
	Kubeconfig string // KUBECONFIG (required)
	RepoRoot   string // the checkout (charts/, bin/)
	Namespace  string // RACKCACHE_E2E_NAMESPACE: the release's namespace (rackcache-system)
	Release    string // RACKCACHE_E2E_RELEASE: the helm release name (rackcache)
	// ValuesFiles (RACKCACHE_E2E_VALUES, comma-separated) are given to
	// helm install on top of the chart's defaults.
	ValuesFiles []string
	// CacheNodeSelector (RACKCACHE_E2E_CACHE_NODES, k=v): the cache servers.
	CacheNodeSelector map[string]string
	// ComputeNodeSelector (RACKCACHE_E2E_COMPUTE_NODES, k=v): where the
	// specs' pods run; their kernel must have the NVMe/TCP initiator.
	ComputeNodeSelector map[string]string
	// CacheDevice (RACKCACHE_E2E_CACHE_DEVICE) and CacheDeviceSize
	// (RACKCACHE_E2E_CACHE_DEVICE_SIZE): the cache device (or file) on every
	// cache server.
	CacheDevice     string
	CacheDeviceSize string
	DataplaneImage  string // RACKCACHE_E2E_DATAPLANE_IMAGE (the chart's registry and appVersion)
	WorkloadImage   string // RACKCACHE_E2E_WORKLOAD_IMAGE: an image with busybox's sh, dd, md5sum
	// PrometheusURL (RACKCACHE_E2E_PROMETHEUS_URL): a Prometheus scraping
	// the cluster as the chart's ServiceMonitors say, with its alerts loaded.
	PrometheusURL string
	// PrometheusTokenFile (RACKCACHE_E2E_PROMETHEUS_TOKEN_FILE): the file
	// that Prometheus's dataplane job reads its bearer token from. The
	// suite writes the operator's scrape token there, as the Prometheus
	// Operator does from the ServiceMonitor's Secret reference.
	PrometheusTokenFile string
	// PrometheusOperatorTokenFile (RACKCACHE_E2E_PROMETHEUS_OPERATOR_TOKEN_FILE):
	// the file its operator job reads its bearer token from; the suite
	// writes the token of a ServiceAccount bound to rackcache-metrics-reader.
	PrometheusOperatorTokenFile string
	// NodeStop and NodeStart (RACKCACHE_E2E_NODE_STOP, RACKCACHE_E2E_NODE_START):
	// commands that cut a cache-server node's power (its kubelet and
	// containers killed, as by a crash) and bring it back; each is run
	// with the node's name as its last argument. The node-loss spec needs
	// them (hack/cluster.sh node-stop and node-start on the local cluster).
	NodeStop  []string
	NodeStart []string
	Ceph      CephConfig
}

// CephConfig is the Ceph cluster the volumes live in.
type CephConfig struct {
	Monitors []string // RACKCACHE_CEPH_MON_V1 or RACKCACHE_E2E_CEPH_MONITORS (comma-separated)
	Pool     string   // RACKCACHE_CEPH_POOL
	User     string   // RACKCACHE_CEPH_USER
	Key      string   // RACKCACHE_CEPH_KEY
	// Conf (CEPH_CONF) lets the suite run `rbd` with admin rights to check
	// Ceph's own copy of the data; NetNS (RACKCACHE_CLUSTER_NETNS) is the
	// network namespace to run it in, when Ceph listens only there.
	Conf  string
	NetNS string
}

// LoadConfig reads the inputs; it fails on a missing required one.
func LoadConfig() (*Config, error) {
	c := &Config{
		Kubeconfig:                  os.Getenv("KUBECONFIG"),
		RepoRoot:                    testframework.RepoRoot(),
		Namespace:                   env("RACKCACHE_E2E_NAMESPACE", "rackcache-system"),
		Release:                     env("RACKCACHE_E2E_RELEASE", "rackcache"),
		CacheDevice:                 os.Getenv("RACKCACHE_E2E_CACHE_DEVICE"),
		CacheDeviceSize:             env("RACKCACHE_E2E_CACHE_DEVICE_SIZE", "1Gi"),
		DataplaneImage:              os.Getenv("RACKCACHE_E2E_DATAPLANE_IMAGE"),
		WorkloadImage:               os.Getenv("RACKCACHE_E2E_WORKLOAD_IMAGE"),
		PrometheusURL:               os.Getenv("RACKCACHE_E2E_PROMETHEUS_URL"),
		PrometheusTokenFile:         os.Getenv("RACKCACHE_E2E_PROMETHEUS_TOKEN_FILE"),
		PrometheusOperatorTokenFile: os.Getenv("RACKCACHE_E2E_PROMETHEUS_OPERATOR_TOKEN_FILE"),
		Ceph: CephConfig{
			Pool:  env("RACKCACHE_CEPH_POOL", "rbd"),
			User:  os.Getenv("RACKCACHE_CEPH_USER"),
			Key:   os.Getenv("RACKCACHE_CEPH_KEY"),
			Conf:  os.Getenv("CEPH_CONF"),
			NetNS: os.Getenv("RACKCACHE_CLUSTER_NETNS"),
		},
	}
	c.NodeStop = strings.Fields(os.Getenv("RACKCACHE_E2E_NODE_STOP"))
	c.NodeStart = strings.Fields(os.Getenv("RACKCACHE_E2E_NODE_START"))
	if v := os.Getenv("RACKCACHE_E2E_VALUES"); v != "" {
		c.ValuesFiles = strings.Split(v, ",")
	}
	mons := env("RACKCACHE_E2E_CEPH_MONITORS", os.Getenv("RACKCACHE_CEPH_MON_V1"))
	if mons != "" {
		c.Ceph.Monitors = strings.Split(mons, ",")
	}
	var err error
	if c.CacheNodeSelector, err = selector("RACKCACHE_E2E_CACHE_NODES", "rackcache.io/cache-server=true"); err != nil {
		return nil, err
	}
	if c.ComputeNodeSelector, err = selector("RACKCACHE_E2E_COMPUTE_NODES", "rackcache.io/compute=true"); err != nil {
		return nil, err
	}
	var missing []string
	for name, v := range map[string]string{
		"KUBECONFIG": c.Kubeconfig, "RACKCACHE_E2E_CACHE_DEVICE": c.CacheDevice,
		"RACKCACHE_E2E_WORKLOAD_IMAGE": c.WorkloadImage, "RACKCACHE_CEPH_USER": c.Ceph.User,
		"RACKCACHE_CEPH_KEY": c.Ceph.Key,
	} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(c.Ceph.Monitors) == 0 {
		missing = append(missing, "RACKCACHE_CEPH_MON_V1 or RACKCACHE_E2E_CEPH_MONITORS")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("e2e inputs missing: %s (hack/e2e.sh sets them for the local cluster)", strings.Join(missing, ", "))
	}
	if c.DataplaneImage == "" {
		v, err := chartAppVersion(c.RepoRoot)
		if err != nil {
			return nil, err
		}
		c.DataplaneImage = "ghcr.io/rackcache/rackcache-dataplane:" + v
	}
	return c, nil
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func selector(name, def string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(env(name, def), ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s: want key=value[,key=value], got %q", name, kv)
		}
		out[k] = v
	}
	return out, nil
}

func chartAppVersion(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "charts", "rackcache", "Chart.yaml"))
	if err != nil {
		return "", fmt.Errorf("read the chart's appVersion: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "appVersion:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"`), nil
		}
	}
	return "", fmt.Errorf("no appVersion in charts/rackcache/Chart.yaml")
}
