package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/mount-utils"
	utilexec "k8s.io/utils/exec"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rackcache/rackcache/csi"
	csiexec "github.com/rackcache/rackcache/csi/exec"
	"github.com/rackcache/rackcache/csi/nvme"
	"github.com/rackcache/rackcache/csi/registration"
)

// sysfsRoot is where the node plugin reads NVMe subsystems and namespaces.
const sysfsRoot = "/sys"

// nodeOptions wires the node service: the host NQN (created once), the
// node's rack (--rack, else its Node's label), nvme-cli and mount-utils.
// It is ready while nvme-cli can be found.
func nodeOptions(ctx context.Context, cfg *config) (csi.NodeOptions, func(context.Context) error, error) {
	hostNQN, hostID, err := nvme.HostNQN(cfg.hostNQNFile)
	if err != nil {
		return csi.NodeOptions{}, nil, fmt.Errorf("host NQN: %w", err)
	}
	rack := cfg.rack
	if rack == "" {
		if rack, err = nodeRack(ctx, cfg); err != nil {
			return csi.NodeOptions{}, nil, err
		}
	}
	opts := csi.NodeOptions{
		NodeName:   cfg.nodeName,
		Rack:       rack,
		HostNQN:    hostNQN,
		HostID:     hostID,
		MaxVolumes: cfg.maxVolumes,
		NVMe:       nvmeAttacher{cli: &nvme.CLI{Exec: csiexec.Run, SysfsRoot: sysfsRoot}},
		Mounter:    &mount.SafeFormatAndMount{Interface: mount.New(""), Exec: utilexec.New()},
		PortalMap:  cfg.portalMap,
		Connect:    cfg.connect,
	}
	ready := func(context.Context) error {
		if _, err := exec.LookPath("nvme"); err != nil {
			return fmt.Errorf("nvme-cli: %w", err)
		}
		return nil
	}
	return opts, ready, nil
}

// nodeRack reads the node's rack label from its Node object.
func nodeRack(ctx context.Context, cfg *config) (string, error) {
	c, _, err := kubeClient(cfg.kubeconfig)
	if err != nil {
		return "", fmt.Errorf("read the rack of node %s (or give --rack): %w", cfg.nodeName, err)
	}
	var node corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: cfg.nodeName}, &node); err != nil {
		return "", fmt.Errorf("read Node %s for its %s label (or give --rack): %w", cfg.nodeName, cfg.rackLabel, err)
	}
	return node.Labels[cfg.rackLabel], nil
}

// nvmeAttacher adapts csi/nvme to the driver.
type nvmeAttacher struct{ cli *nvme.CLI }

func (a nvmeAttacher) Connect(ctx context.Context, at csi.Attachment) (int, error) {
	o := connectOptions(at.Connect)
	o.SubNQN, o.HostNQN, o.HostID = at.SubNQN, at.HostNQN, at.HostID
	if at.Keys != nil {
		o.DHChapSecret, o.DHChapCtrlSecret = at.Keys.Host, at.Keys.Ctrl
		if at.Keys.PSK != "" {
			if err := a.cli.InsertPSK(ctx, at.HostNQN, at.SubNQN, at.Keys.PSK); err != nil {
				return 0, err
			}
			o.TLS = true
		}
	}
	return a.cli.Connect(ctx, o, nvmePortals(at.Portals))
}

func (a nvmeAttacher) InsertPSK(ctx context.Context, hostNQN, subNQN, psk string) error {
	return a.cli.InsertPSK(ctx, hostNQN, subNQN, psk)
}

func (a nvmeAttacher) SetKeys(subNQN string, keys csi.HostKeys) (int, error) {
	return nvme.SetKeys(sysfsRoot, subNQN, keys.Host, keys.Ctrl)
}

func (a nvmeAttacher) Disconnect(ctx context.Context, subNQN string) error {
	return a.cli.Disconnect(ctx, subNQN)
}

func (a nvmeAttacher) Attached(ctx context.Context) (map[string][]csi.HostPath, error) {
	subs, err := a.cli.Subsystems(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]csi.HostPath{}
	for _, s := range subs {
		for _, p := range s.Paths {
			q := p.Portal()
			out[s.NQN] = append(out[s.NQN], csi.HostPath{Name: p.Name, Portal: csi.Portal{Address: q.Address, Port: q.Port}, Live: p.Live()})
		}
	}
	return out, nil
}

func (a nvmeAttacher) AddPaths(ctx context.Context, subNQN string, portals []csi.Portal, d csi.ConnectDefaults) (int, error) {
	return a.cli.AddPaths(ctx, subNQN, nvmePortals(portals), connectOptions(d))
}

// connectOptions are nvme connect's options for the driver's defaults.
func connectOptions(d csi.ConnectDefaults) nvme.ConnectOptions {
	return nvme.ConnectOptions{
		Transport: "tcp", CtrlLossTmo: d.CtrlLossTmo, ReconnectDelay: d.ReconnectDelay,
		KeepAliveTmo: d.KeepAliveTmo, NrIOQueues: d.NrIOQueues,
	}
}

func (a nvmeAttacher) RemovePath(ctx context.Context, subNQN, name string) error {
	return a.cli.RemovePath(ctx, subNQN, name)
}

func nvmePortals(portals []csi.Portal) []nvme.Portal {
	out := make([]nvme.Portal, len(portals))
	for i, p := range portals {
		out[i] = nvme.Portal{Address: p.Address, Port: p.Port}
	}
	return out
}

func (a nvmeAttacher) Device(subNQN, nsUUID string) (string, error) {
	dev, err := nvme.FindNamespaceDevice(sysfsRoot, subNQN, nsUUID)
	if errors.Is(err, nvme.ErrNotFound) {
		return "", fmt.Errorf("%w: %w", csi.ErrNotFound, err)
	}
	return dev, err
}

func (a nvmeAttacher) Live(subNQN string) bool { return nvme.PathLive(sysfsRoot, subNQN) }

func (a nvmeAttacher) Rescan(subNQN string) error {
	return nvme.RescanControllers(sysfsRoot, subNQN)
}

// register serves the kubelet's plugin registration until ctx ends.
func register(ctx context.Context, cfg *config) error {
	u, err := url.Parse(cfg.endpoint)
	if err != nil || u.Scheme != "unix" {
		return fmt.Errorf("kubelet registration needs a unix:// endpoint, not %q", cfg.endpoint)
	}
	path := u.Host + u.Path
	if cfg.kubeletPluginDir != "" {
		path = filepath.Join(cfg.kubeletPluginDir, filepath.Base(path))
	}
	return registration.Serve(ctx, cfg.registrationDir, csi.DriverName, path, []string{"1.0.0"})
}
