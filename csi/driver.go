// Package csi is rackcache's CSI driver: the identity, controller and node
// services of csi.rackcache.io. The controller provisions a volume as an
// RBD image plus a CachedVolume (the operator serves it from a cache
// server); the node attaches it with the kernel's NVMe/TCP initiator.
package csi

import (
	"context"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/mount-utils"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DriverName is the CSI driver's name (StorageClass provisioner).
const DriverName = "csi.rackcache.io"

// Mode is which services a process serves.
type Mode string

const (
	ModeController Mode = "controller"
	ModeNode       Mode = "node"
	ModeAll        Mode = "all"
)

// ParseMode reads --mode.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeController, ModeNode, ModeAll:
		return m, nil
	}
	return "", fmt.Errorf("mode %q: want controller, node or all", s)
}

func (m Mode) controller() bool { return m == ModeController || m == ModeAll }
func (m Mode) node() bool       { return m == ModeNode || m == ModeAll }

// ControllerOptions configure the controller service.
type ControllerOptions struct {
	// Client reads and writes CachedVolumes, CachePools and the Ceph
	// Secrets; uncached (every call reads the apiserver).
	Client client.Client
	// Ceph opens RBD connections.
	Ceph Ceph
	// VolumeReadyTimeout bounds the wait for a CachedVolume to become
	// Ready (CreateVolume) or to apply a change (publish, expand); past it
	// the call fails with DeadlineExceeded and the sidecar retries.
	VolumeReadyTimeout time.Duration
	// PollInterval is how often those waits read the CachedVolume.
	PollInterval time.Duration
}

// NodeOptions configure the node service.
type NodeOptions struct {
	// NodeName is the Kubernetes node's name.
	NodeName string
	// Rack is the node's rack (its accessible topology); empty when the
	// node has no rack label.
	Rack string
	// HostNQN is the node's stable host NQN; HostID its host id.
	HostNQN, HostID string
	// MaxVolumes caps the volumes on this node (0: no cap).
	MaxVolumes int64
	// NVMe attaches and finds namespaces.
	NVMe NVMe
	// Mounter formats and mounts.
	Mounter *mount.SafeFormatAndMount
	// PortalMap rewrites target portals "host:port" (NAT, port forwards).
	PortalMap map[string]string
	// Connect are the nvme connect defaults.
	Connect ConnectDefaults
	// Volumes reads CachedVolumes (an informer's cache; nil without the
	// Kubernetes API): a stage connects to the volume's current paths,
	// and the path follower keeps them (node_paths.go).
	Volumes client.Reader
}

// Driver implements the CSI services. One binary serves either role.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	mode    Mode
	version string
	// rackLabel is the topology key, both roles: the Node label the
	// CachePools' placement.rackLabel also names.
	rackLabel string
	ctrl      ControllerOptions
	node      NodeOptions
	// ready reports whether the dependencies answer (Probe).
	ready func(ctx context.Context) error
	locks *volumeLocks
}

// NewDriver checks the options of the mode's services.
func NewDriver(mode Mode, version, rackLabel string, ctrl ControllerOptions, node NodeOptions, ready func(context.Context) error) (*Driver, error) {
	if mode.controller() {
		if ctrl.Client == nil || ctrl.Ceph == nil {
			return nil, fmt.Errorf("controller mode needs a Kubernetes client and a Ceph connector")
		}
		if ctrl.VolumeReadyTimeout <= 0 {
			ctrl.VolumeReadyTimeout = 2 * time.Minute
		}
		if ctrl.PollInterval <= 0 {
			ctrl.PollInterval = 500 * time.Millisecond
		}
	}
	if mode.node() {
		if node.NodeName == "" || node.HostNQN == "" || node.NVMe == nil || node.Mounter == nil {
			return nil, fmt.Errorf("node mode needs a node name, a host NQN, an NVMe attacher and a mounter")
		}
	}
	if rackLabel == "" {
		return nil, fmt.Errorf("the rack label (topology key) is empty")
	}
	if ready == nil {
		ready = func(context.Context) error { return nil }
	}
	return &Driver{mode: mode, version: version, rackLabel: rackLabel, ctrl: ctrl, node: node, ready: ready, locks: newVolumeLocks()}, nil
}
