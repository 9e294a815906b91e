package main

import (
	"flag"
	"os"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/rackcache/rackcache/controllers/dashboard"
	"github.com/rackcache/rackcache/controllers/operator"
)

// config is everything the command line sets.
type config struct {
	metricsAddr string
	// metricsSecure serves /metrics over HTTPS to authorized callers only.
	metricsSecure  bool
	metricsCertDir string
	probeAddr      string
	leaderElect    bool
	// dashboardAddr is where the read-only dashboard is served ("0": off).
	dashboardAddr string
	dashboard     dashboard.Options
	operator      operator.Options
	zap           zap.Options
}

// prefixList is a comma-separated flag value; an empty entry is dropped.
type prefixList struct{ list *[]string }

func (p prefixList) String() string {
	if p.list == nil {
		return ""
	}
	return strings.Join(*p.list, ",")
}

func (p prefixList) Set(v string) error {
	*p.list = nil
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*p.list = append(*p.list, s)
		}
	}
	return nil
}

// parseFlags reads the command line into a config. The namespace defaults to
// POD_NAMESPACE (the Deployment sets it from the downward API), so the
// operator keeps the dataplane objects beside itself wherever it is installed.
func parseFlags(fs *flag.FlagSet, args []string) (*config, error) {
	c := &config{operator: operator.DefaultOptions(), dashboard: dashboard.DefaultOptions()}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		c.operator.Namespace = ns
	}
	fs.StringVar(&c.metricsAddr, "metrics-bind-address", ":8443",
		"Address the Prometheus /metrics endpoint binds to; 0 disables it.")
	fs.BoolVar(&c.metricsSecure, "metrics-secure", true,
		"Serve /metrics over HTTPS, only to callers with a bearer token the API server accepts and the right to get /metrics "+
			"(ClusterRole rackcache-metrics-reader); false serves plain HTTP to anyone who reaches it (the metrics name every volume).")
	fs.StringVar(&c.metricsCertDir, "metrics-cert-dir", "",
		"Directory with tls.crt and tls.key for the secure metrics endpoint; empty: a self-signed certificate made at start.")
	fs.StringVar(&c.probeAddr, "health-probe-bind-address", ":8081",
		"Address the /healthz and /readyz probe endpoints bind to.")
	fs.StringVar(&c.dashboardAddr, "dashboard-bind-address", "127.0.0.1:8082",
		"Address the read-only web dashboard (/dashboard/, plain HTTP, no authentication) binds to; 0 disables it. "+
			"The loopback default is reached with kubectl port-forward: the page names every volume.")
	fs.DurationVar(&c.dashboard.SamplePeriod, "dashboard-sample-period", c.dashboard.SamplePeriod,
		"How often the dashboard samples volume statistics and Events for its charts (it keeps the last 360 samples).")
	fs.BoolVar(&c.leaderElect, "leader-elect", false,
		"Elect a leader (a Lease in --namespace) so that only one replica reconciles at a time.")
	fs.StringVar(&c.operator.Namespace, "namespace", c.operator.Namespace,
		"Namespace of the operator's own objects: the dataplane DaemonSets, Secrets, ConfigMaps and the leader election Lease (POD_NAMESPACE when set).")
	fs.DurationVar(&c.operator.StatusInterval, "status-interval", c.operator.StatusInterval,
		"How often each cache server's state and each volume's statistics are read from the dataplanes.")
	fs.DurationVar(&c.operator.ServerLostGrace, "server-lost-grace", c.operator.ServerLostGrace,
		"How long a cache server may be unreachable before its write-through and write-around volumes are re-placed.")
	fs.DurationVar(&c.operator.DataplaneTimeout, "dataplane-timeout", c.operator.DataplaneTimeout,
		"Deadline of each JSON-RPC call to a dataplane.")
	fs.Var(prefixList{&c.operator.Admission.DevicePrefixes}, "allowed-device-prefixes",
		"Comma-separated path prefixes a CachePool's devices must start with (besides the pool's own /var/lib/rackcache/<pool>/); "+
			"a pool naming another path is not applied (Ready False, NotAllowed): CachePool write access would otherwise be root on the cache servers.")
	fs.Var(prefixList{&c.operator.Admission.ImagePrefixes}, "allowed-image-prefixes",
		"Comma-separated prefixes a CachePool's dataplane image must start with (registries you trust to run as root on the cache servers).")
	fs.StringVar(&c.operator.ServiceAccount, "service-account", c.operator.ServiceAccount,
		"The operator's own ServiceAccount (in --namespace): it mints a short-lived token per cache server for it, and the servers let no other caller in.")
	fs.StringVar(&c.operator.DataplaneAPI, "dataplane-kubernetes-api", "",
		"host:port where the dataplane pods reach the API server to review the operator's tokens (clusters without a service proxy); empty: the in-cluster address the kubelet gives them.")
	// Production settings by default: JSON lines at info level.
	c.zap = zap.Options{Development: false}
	c.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return c, nil
}
