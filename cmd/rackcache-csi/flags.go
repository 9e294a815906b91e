package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/csi"
)

// config is what the flags set (docs/csi.md lists them).
type config struct {
	mode               csi.Mode
	endpoint           string
	kubeconfig         string
	nodeName           string
	rack               string
	rackLabel          string
	hostNQNFile        string
	registrationDir    string
	kubeletPluginDir   string
	maxVolumes         int64
	portalMap          portalMap
	probeListen        string
	volumeReadyTimeout time.Duration
	followPaths        time.Duration
	connect            csi.ConnectDefaults
	zap                zap.Options
}

// portalMap is the repeatable --portal-map FROM=TO flag.
type portalMap map[string]string

func (p portalMap) String() string {
	var parts []string
	for k, v := range p {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

func (p portalMap) Set(s string) error {
	from, to, ok := strings.Cut(s, "=")
	if !ok || !strings.Contains(from, ":") || !strings.Contains(to, ":") {
		return fmt.Errorf("%q: want HOST:PORT=HOST:PORT", s)
	}
	p[from] = to
	return nil
}

func parseFlags(fs *flag.FlagSet, args []string) (*config, error) {
	cfg := &config{portalMap: portalMap{}, connect: csi.DefaultConnect}
	mode := fs.String("mode", "", "which services to serve: controller, node or all")
	fs.StringVar(&cfg.endpoint, "endpoint", "unix:///csi/csi.sock", "the CSI endpoint: unix:///path or tcp://host:port")
	fs.StringVar(&cfg.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster, then $KUBECONFIG)")
	fs.StringVar(&cfg.nodeName, "node-name", os.Getenv("NODE_NAME"), "node mode: this node's name (default $NODE_NAME)")
	fs.StringVar(&cfg.rack, "rack", "", "node mode: this node's rack (default: the Node's --rack-label label, read from the apiserver)")
	fs.StringVar(&cfg.rackLabel, "rack-label", rcv1.DefaultRackLabel, "the topology key: the Node label CachePools' placement.rackLabel names")
	fs.StringVar(&cfg.hostNQNFile, "hostnqn-file", "/etc/nvme/hostnqn", "node mode: the host NQN file (created once when absent; hostid beside it)")
	fs.StringVar(&cfg.registrationDir, "registration-dir", "/var/lib/kubelet/plugins_registry", "node mode: the kubelet's plugin registration directory; empty disables the built-in registration (use node-driver-registrar then)")
	fs.StringVar(&cfg.kubeletPluginDir, "kubelet-plugin-dir", "", "node mode: the endpoint's directory as the kubelet sees it (default: the endpoint's own path)")
	fs.Int64Var(&cfg.maxVolumes, "max-volumes", 0, "node mode: the most volumes this node takes (0: no limit)")
	fs.Var(cfg.portalMap, "portal-map", "node mode, repeatable: rewrite a target portal HOST:PORT=HOST:PORT (NAT, port forwards)")
	fs.StringVar(&cfg.probeListen, "probe-listen", ":9808", "HTTP address of /healthz (the CSI Probe); empty disables")
	fs.DurationVar(&cfg.volumeReadyTimeout, "volume-ready-timeout", 2*time.Minute, "controller mode: how long a call waits for a CachedVolume to be served or to apply a change")
	fs.DurationVar(&cfg.followPaths, "follow-paths", 30*time.Second, "node mode: how often the host's NVMe paths are matched to each volume's CachedVolume paths (a change of paths is followed at once); 0 disables")
	fs.IntVar(&cfg.connect.CtrlLossTmo, "ctrl-loss-tmo", cfg.connect.CtrlLossTmo, "node mode: default nvme connect --ctrl-loss-tmo, seconds (-1: forever)")
	fs.IntVar(&cfg.connect.ReconnectDelay, "reconnect-delay", cfg.connect.ReconnectDelay, "node mode: default nvme connect --reconnect-delay, seconds")
	fs.IntVar(&cfg.connect.KeepAliveTmo, "keep-alive-tmo", cfg.connect.KeepAliveTmo, "node mode: default nvme connect --keep-alive-tmo, seconds")
	fs.IntVar(&cfg.connect.NrIOQueues, "nr-io-queues", cfg.connect.NrIOQueues, "node mode: default nvme connect --nr-io-queues (0: the kernel's choice)")
	cfg.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	m, err := csi.ParseMode(*mode)
	if err != nil {
		return nil, fmt.Errorf("--mode: %w", err)
	}
	cfg.mode = m
	if m != csi.ModeController && cfg.nodeName == "" {
		return nil, fmt.Errorf("node mode needs --node-name or $NODE_NAME")
	}
	return cfg, nil
}
