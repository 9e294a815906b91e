package csi

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/mount-utils"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/cachedvolume"
)

// Volume expansion, online. The controller grows the RBD image, then the
// CachedVolume's size; the operator has the dataplane grow its bdevs and
// the namespace (bdev_rbd_resize), which tells connected hosts. The node
// then waits for the kernel to see the new size and grows the filesystem.

// ControllerExpandVolume grows the RBD image, then the CachedVolume's
// size, and returns once the dataplane serves the new size.
func (d *Driver) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	if err := required(
		need{"a volume id", req.GetVolumeId() != ""},
		need{"a capacity range", req.GetCapacityRange() != nil},
	); err != nil {
		return nil, err
	}
	size, err := requestedSize(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	id, unlock, err := d.lockVolume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer unlock()
	cv, err := d.getVolume(ctx, id)
	if err != nil {
		return nil, err
	}
	nodeExpansion := req.GetVolumeCapability().GetBlock() == nil
	if cur := cv.Spec.Size.Value(); cur >= size && applied(cv) {
		return &csi.ControllerExpandVolumeResponse{CapacityBytes: cur, NodeExpansionRequired: nodeExpansion}, nil
	}
	images, err := d.openImages(ctx, id.CachePool, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer images.Close()
	info, err := images.ImageInfo(ctx, id.RBDPool, id.Image())
	if err != nil {
		return nil, errorf(ErrUnavailable, "read RBD image %s/%s: %v", id.RBDPool, id.Image(), err)
	}
	if info.Size < uint64(size) {
		if err := images.ResizeImage(ctx, id.RBDPool, id.Image(), uint64(size)); err != nil {
			return nil, errorf(ErrUnavailable, "grow RBD image %s/%s to %d bytes: %v", id.RBDPool, id.Image(), size, err)
		}
	}
	cv, err = d.updateVolume(ctx, cv.Name, func(cv *rcv1.CachedVolume) (bool, error) {
		if cv.Spec.Size.Value() >= size {
			return false, nil
		}
		cv.Spec.Size = *resource.NewQuantity(size, resource.BinarySI)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if cv, err = d.waitApplied(ctx, cv.Name); err != nil {
		return nil, err
	}
	logr.FromContextOrDiscard(ctx).Info("volume expanded", "volume", id.String(), "size", cv.Spec.Size.Value())
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: cv.Spec.Size.Value(), NodeExpansionRequired: nodeExpansion}, nil
}

// NodeExpandVolume waits until the kernel sees the namespace's new size
// (the target's notice makes it rescan; a rescan is asked for when it
// lags), then grows a filesystem online; a block volume needs no more.
func (d *Driver) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	if err := required(
		need{"a volume id", req.GetVolumeId() != ""},
		need{"a volume path", req.GetVolumePath() != ""},
	); err != nil {
		return nil, err
	}
	id, unlock, err := d.lockVolume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer unlock()
	path := req.GetVolumePath()
	fi, err := statVolumePath(path)
	if err != nil {
		return nil, err
	}
	block := req.GetVolumeCapability().GetBlock() != nil || fi.Mode()&os.ModeDevice != 0 || fi.Mode().IsRegular()
	dev := path
	if !block {
		if dev, _, err = mount.GetDeviceNameFromMount(d.node.Mounter, path); err != nil || dev == "" {
			return nil, errorf(ErrNotFound, "no device is mounted at %s", path)
		}
	}
	size, err := d.waitDeviceSize(ctx, cachedvolume.SubsystemNQN(id.Image()), dev, req.GetCapacityRange().GetRequiredBytes())
	if err != nil {
		return nil, err
	}
	if !block {
		if _, err := mount.NewResizeFs(d.node.Mounter.Exec).Resize(dev, path); err != nil {
			return nil, fmt.Errorf("grow the filesystem of %s at %s: %w", dev, path, err)
		}
	}
	logr.FromContextOrDiscard(ctx).Info("volume expanded on the node", "volume", id.String(), "device", dev, "size", size)
	return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}

// deviceSizeWait bounds how long the node waits for the kernel to see a
// grown namespace; rescanEvery is how often it asks for a rescan meanwhile.
const (
	deviceSizeWait = 60 * time.Second
	rescanEvery    = 5 * time.Second
)

// waitDeviceSize returns dev's size once it is at least want bytes.
func (d *Driver) waitDeviceSize(ctx context.Context, subNQN, dev string, want int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, deviceSizeWait)
	defer cancel()
	lastRescan := time.Now()
	for {
		size, err := blockDeviceSize(dev)
		if err != nil {
			return 0, err
		}
		if size >= want {
			return size, nil
		}
		if time.Since(lastRescan) >= rescanEvery {
			lastRescan = time.Now()
			if err := d.node.NVMe.Rescan(subNQN); err != nil {
				logr.FromContextOrDiscard(ctx).Info("namespace rescan failed", "subsystem", subNQN, "error", err.Error())
			}
		}
		select {
		case <-ctx.Done():
			return 0, errorf(ErrUnavailable, "the kernel still sees %s (%s) at %d bytes, %d expected: is the dataplane's namespace grown?", dev, subNQN, size, want)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
