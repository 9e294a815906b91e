package csi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/mount-utils"

	"github.com/rackcache/rackcache/controllers/cachedvolume"
)

// deviceWait bounds the wait for a namespace's block device to appear in
// sysfs after nvme connect (the kernel scans namespaces asynchronously).
const deviceWait = 30 * time.Second

// NodeGetCapabilities lists the node RPCs.
func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	resp := &csi.NodeGetCapabilitiesResponse{}
	for _, c := range nodeCapabilities {
		resp.Capabilities = append(resp.Capabilities, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: c}},
		})
	}
	return resp, nil
}

// NodeGetInfo: the node id carries the host NQN; the node's rack is its
// accessible topology.
func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	resp := &csi.NodeGetInfoResponse{
		NodeId:            nodeIDOf(d.node.NodeName, d.node.HostNQN),
		MaxVolumesPerNode: d.node.MaxVolumes,
	}
	if len(resp.NodeId) > maxNodeIDLength {
		return nil, errorf(ErrFailedPrecondition, "node id %q is longer than %d bytes: shorten the node name or host NQN", resp.NodeId, maxNodeIDLength)
	}
	if d.node.Rack != "" {
		resp.AccessibleTopology = &csi.Topology{Segments: map[string]string{d.rackLabel: d.node.Rack}}
	}
	return resp, nil
}

// target is where a staged volume's namespace is: the subsystem and
// namespace (from the volume id and context) and the portals exporting
// it, the owner's first.
type target struct {
	SubNQN, NSUUID string
	Portals        []Portal
}

// targetOf reads the volume and publish contexts NodeStage gets: the
// publish context's portals (where the volume is served now: every path,
// or the owner's alone from an older controller) win over the volume
// context's (where it was created); each then goes through the portal map.
func (d *Driver) targetOf(id volumeID, vc, pc map[string]string) (target, error) {
	t := target{SubNQN: cachedvolume.SubsystemNQN(id.Image()), NSUUID: vc[ctxNSUUID]}
	switch {
	case pc[ctxPaths] != "":
		for _, hp := range strings.Split(pc[ctxPaths], ",") {
			host, port, err := net.SplitHostPort(hp)
			if err != nil || host == "" || port == "" {
				return t, errorf(ErrInvalidArgument, "publish context %s: %q is not address:port", ctxPaths, hp)
			}
			t.Portals = append(t.Portals, Portal{host, port})
		}
	case pc[ctxAddress] != "" && pc[ctxPort] != "":
		t.Portals = []Portal{{pc[ctxAddress], pc[ctxPort]}}
	case vc[ctxAddress] != "" && vc[ctxPort] != "":
		t.Portals = []Portal{{vc[ctxAddress], vc[ctxPort]}}
	}
	if len(t.Portals) == 0 || t.NSUUID == "" {
		return t, errorf(ErrInvalidArgument, "the volume context must carry %s, %s and %s (CreateVolume returns them)", ctxAddress, ctxPort, ctxNSUUID)
	}
	if got := vc[ctxSubNQN]; got != "" && got != t.SubNQN {
		return t, errorf(ErrInvalidArgument, "volume context subsystem %s is not volume %s's (%s)", got, id, t.SubNQN)
	}
	for i, p := range t.Portals {
		q, err := d.mapPortal(p)
		if err != nil {
			return t, err
		}
		t.Portals[i] = q
	}
	return t, nil
}

// attach connects to the volume's subsystem and waits for its block
// device.
func (d *Driver) attach(ctx context.Context, t target, vc, secrets map[string]string) (string, error) {
	opts, err := connectOptions(vc, d.node.Connect)
	if err != nil {
		return "", errorf(ErrInvalidArgument, "%v", err)
	}
	keys, err := d.hostKeys(secrets)
	if err != nil {
		return "", err
	}
	connected, err := d.node.NVMe.Connect(ctx, Attachment{
		Portals: t.Portals, SubNQN: t.SubNQN,
		HostNQN: d.node.HostNQN, HostID: d.node.HostID, Connect: opts, Keys: keys,
	})
	if connected == 0 {
		hint := ""
		if keys == nil {
			hint = " (" + keysHint + ")"
		}
		return "", errorf(ErrUnavailable, "nvme connect to %s at %v: %v%s", t.SubNQN, t.Portals, err, hint)
	}
	if err != nil {
		// A path to a lost server: multipath carries I/O on the others.
		logr.FromContextOrDiscard(ctx).Info("not every path of the volume connected", "subnqn", t.SubNQN,
			"connected", connected, "portals", len(t.Portals), "error", err.Error())
	}
	// A controller left live by an earlier stage keeps the keys it has.
	if keys != nil {
		if _, err := d.node.NVMe.SetKeys(t.SubNQN, *keys); err != nil {
			return "", errorf(ErrUnavailable, "%v", err)
		}
	}
	return d.waitDevice(ctx, t)
}

// waitDevice polls sysfs for the namespace's block device.
func (d *Driver) waitDevice(ctx context.Context, t target) (string, error) {
	var dev string
	ctx, cancel := context.WithTimeout(ctx, deviceWait)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		var err error
		dev, err = d.node.NVMe.Device(t.SubNQN, t.NSUUID)
		return err == nil, nil
	})
	if err != nil {
		return "", errorf(ErrUnavailable, "namespace %s of %s has no block device after %s", t.NSUUID, t.SubNQN, deviceWait)
	}
	return dev, nil
}

// NodeStageVolume attaches the namespace and, for a mount volume, formats
// it when blank and mounts it on the staging path.
func (d *Driver) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if err := required(
		need{"a volume id", req.GetVolumeId() != ""},
		need{"a staging target path", req.GetStagingTargetPath() != ""},
		need{"a volume capability", req.GetVolumeCapability() != nil},
	); err != nil {
		return nil, err
	}
	if err := validateCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	id, err := parseVolumeID(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	t, err := d.targetOf(id, req.GetVolumeContext(), req.GetPublishContext())
	if err != nil {
		return nil, err
	}
	unlock, err := d.locks.lock(id.String())
	if err != nil {
		return nil, err
	}
	defer unlock()
	// The path follower leaves the subsystem alone meanwhile.
	unlockPaths, err := d.locks.lock(pathsLock(t.SubNQN))
	if err != nil {
		return nil, err
	}
	defer unlockPaths()
	t = d.currentPortals(ctx, id, t)
	log := logr.FromContextOrDiscard(ctx).WithValues("volume", id.String(), "subnqn", t.SubNQN)
	dev, err := d.attach(ctx, t, req.GetVolumeContext(), req.GetSecrets())
	if err != nil {
		return nil, err
	}
	mnt := req.GetVolumeCapability().GetMount()
	if mnt == nil {
		log.Info("volume staged (block)", "device", dev)
		return &csi.NodeStageVolumeResponse{}, nil
	}
	staging := req.GetStagingTargetPath()
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return nil, fmt.Errorf("create staging path %s: %w", staging, err)
	}
	notMnt, err := d.node.Mounter.IsLikelyNotMountPoint(staging)
	if err != nil {
		return nil, fmt.Errorf("check staging path %s: %w", staging, err)
	}
	if !notMnt {
		return &csi.NodeStageVolumeResponse{}, nil
	}
	fs := mnt.GetFsType()
	if fs == "" {
		fs = "ext4"
	}
	if err := d.node.Mounter.FormatAndMount(dev, staging, fs, mnt.GetMountFlags()); err != nil {
		return nil, fmt.Errorf("format (if blank) and mount %s on %s as %s: %w", dev, staging, fs, err)
	}
	log.Info("volume staged", "device", dev, "fsType", fs, "path", staging)
	return &csi.NodeStageVolumeResponse{}, nil
}

// NodeUnstageVolume unmounts the staging path and disconnects the
// volume's subsystem (each volume has a subsystem, so no other staged
// volume uses its controllers). A missing staging path is success.
func (d *Driver) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if err := required(
		need{"a volume id", req.GetVolumeId() != ""},
		need{"a staging target path", req.GetStagingTargetPath() != ""},
	); err != nil {
		return nil, err
	}
	id, unlock, err := d.lockVolume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer unlock()
	staging := req.GetStagingTargetPath()
	if err := mount.CleanupMountPoint(staging, d.node.Mounter, true); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("unmount staging path %s: %w", staging, err)
	}
	subNQN := cachedvolume.SubsystemNQN(id.Image())
	unlockPaths, err := d.locks.lock(pathsLock(subNQN))
	if err != nil {
		return nil, err
	}
	defer unlockPaths()
	if err := d.node.NVMe.Disconnect(ctx, subNQN); err != nil {
		return nil, errorf(ErrUnavailable, "nvme disconnect %s: %v", subNQN, err)
	}
	logr.FromContextOrDiscard(ctx).Info("volume unstaged", "volume", id.String(), "subnqn", subNQN)
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// NodePublishVolume bind-mounts the staged filesystem (or the block
// device) on the target path; read-only when asked.
func (d *Driver) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if err := required(
		need{"a volume id", req.GetVolumeId() != ""},
		need{"a staging target path", req.GetStagingTargetPath() != ""},
		need{"a target path", req.GetTargetPath() != ""},
		need{"a volume capability", req.GetVolumeCapability() != nil},
	); err != nil {
		return nil, err
	}
	if err := validateCapability(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	id, unlock, err := d.lockVolume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := d.rotateKeys(ctx, cachedvolume.SubsystemNQN(id.Image()), req.GetSecrets()); err != nil {
		return nil, err
	}
	opts := []string{"bind"}
	if req.GetReadonly() {
		opts = append(opts, "ro")
	}
	targetPath := req.GetTargetPath()
	var source string
	if req.GetVolumeCapability().GetBlock() != nil {
		t, err := d.targetOf(id, req.GetVolumeContext(), req.GetPublishContext())
		if err != nil {
			return nil, err
		}
		dev, err := d.node.NVMe.Device(t.SubNQN, t.NSUUID)
		if err != nil {
			return nil, errorf(ErrFailedPrecondition, "volume %s is not staged on this node: %v", id, err)
		}
		source = dev
		if err := makeFile(targetPath); err != nil {
			return nil, err
		}
	} else {
		staging := req.GetStagingTargetPath()
		notMnt, err := d.node.Mounter.IsLikelyNotMountPoint(staging)
		if err != nil || notMnt {
			return nil, errorf(ErrFailedPrecondition, "volume %s is not staged at %s", id, staging)
		}
		source = staging
		opts = append(opts, req.GetVolumeCapability().GetMount().GetMountFlags()...)
		if err := os.MkdirAll(targetPath, 0o750); err != nil {
			return nil, fmt.Errorf("create target path %s: %w", targetPath, err)
		}
	}
	notMnt, err := d.node.Mounter.IsLikelyNotMountPoint(targetPath)
	if err != nil {
		return nil, fmt.Errorf("check target path %s: %w", targetPath, err)
	}
	if !notMnt {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := d.node.Mounter.Mount(source, targetPath, "", opts); err != nil {
		return nil, fmt.Errorf("bind-mount %s on %s: %w", source, targetPath, err)
	}
	logr.FromContextOrDiscard(ctx).Info("volume published", "volume", id.String(), "path", targetPath, "readonly", req.GetReadonly())
	return &csi.NodePublishVolumeResponse{}, nil
}

// makeFile creates the file a block volume is bind-mounted on.
func makeFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	f, err := os.OpenFile(path, os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("create block target %s: %w", path, err)
	}
	return f.Close()
}

// NodeUnpublishVolume unmounts and removes the target path; a missing one
// is success.
func (d *Driver) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if err := required(
		need{"a volume id", req.GetVolumeId() != ""},
		need{"a target path", req.GetTargetPath() != ""},
	); err != nil {
		return nil, err
	}
	id, unlock, err := d.lockVolume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := mount.CleanupMountPoint(req.GetTargetPath(), d.node.Mounter, true); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("unmount target path %s: %w", req.GetTargetPath(), err)
	}
	logr.FromContextOrDiscard(ctx).Info("volume unpublished", "volume", id.String(), "path", req.GetTargetPath())
	return &csi.NodeUnpublishVolumeResponse{}, nil
}
