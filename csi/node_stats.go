package csi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/rackcache/rackcache/controllers/cachedvolume"
)

// NodeGetVolumeStats reports a published volume's usage (bytes and inodes
// of its filesystem, or the block device's size) and its condition:
// abnormal when no NVMe/TCP path to its subsystem is live.
func (d *Driver) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if err := required(
		need{"a volume id", req.GetVolumeId() != ""},
		need{"a volume path", req.GetVolumePath() != ""},
	); err != nil {
		return nil, err
	}
	id, err := parseVolumeID(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	path := req.GetVolumePath()
	fi, err := statVolumePath(path)
	if err != nil {
		return nil, err
	}
	subNQN := cachedvolume.SubsystemNQN(id.Image())
	cond := &csi.VolumeCondition{Abnormal: false, Message: "NVMe/TCP path to " + subNQN + " is live"}
	if !d.node.NVMe.Live(subNQN) {
		cond = &csi.VolumeCondition{Abnormal: true, Message: "no live NVMe/TCP path to " + subNQN + ": I/O waits for the reconnect"}
	}
	resp := &csi.NodeGetVolumeStatsResponse{VolumeCondition: cond}
	if fi.Mode()&os.ModeDevice != 0 || fi.Mode().IsRegular() {
		size, err := blockDeviceSize(path)
		if err != nil {
			return nil, err
		}
		resp.Usage = []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: size}}
		return resp, nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return nil, fmt.Errorf("statfs %s: %w", path, err)
	}
	bs := st.Bsize
	resp.Usage = []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
		{Unit: csi.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
	}
	return resp, nil
}

// statVolumePath stats a published volume's path; a missing one is
// NotFound, as the spec asks of the stats and expand calls.
func statVolumePath(path string) (os.FileInfo, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, errorf(ErrNotFound, "volume path %s does not exist", path)
	}
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	return fi, nil
}

// blockDeviceSize is the size of the block device at path (a device node
// or a file a device is bind-mounted on).
func blockDeviceSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	// Seeking to the end gives a block device's size (as blockdev
	// --getsize64 would) without an ioctl.
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, fmt.Errorf("read the size of block device %s: %w", path, err)
	}
	return size, nil
}
