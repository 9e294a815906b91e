package csi

import (
	"github.com/container-storage-interface/spec/lib/go/csi"
)

// Access modes a cached volume supports: one node at a time (an NVMe
// namespace with a local filesystem; the controller refuses a second
// node while one is published).
var supportedAccessModes = map[csi.VolumeCapability_AccessMode_Mode]bool{
	csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER:        true,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:   true,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER: true,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:  true,
}

// supportedFsTypes are the filesystems NodeStage creates and mounts.
var supportedFsTypes = map[string]bool{"": true, "ext4": true, "xfs": true}

// validateCapabilities checks each capability: an access mode above, and
// block or a mount of a supported filesystem.
func validateCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return errorf(ErrInvalidArgument, "volume capabilities are required")
	}
	for _, c := range caps {
		if err := validateCapability(c); err != nil {
			return err
		}
	}
	return nil
}

func validateCapability(c *csi.VolumeCapability) error {
	if c == nil || c.GetAccessMode() == nil {
		return errorf(ErrInvalidArgument, "a volume capability needs an access mode")
	}
	if !supportedAccessModes[c.GetAccessMode().GetMode()] {
		return errorf(ErrInvalidArgument, "access mode %s is not supported: a cached volume is attached to one node at a time", c.GetAccessMode().GetMode())
	}
	switch {
	case c.GetBlock() != nil:
	case c.GetMount() != nil:
		if fs := c.GetMount().GetFsType(); !supportedFsTypes[fs] {
			return errorf(ErrInvalidArgument, "filesystem %q is not supported (ext4 or xfs)", fs)
		}
	default:
		return errorf(ErrInvalidArgument, "a volume capability needs an access type, block or mount")
	}
	return nil
}

// controllerCapabilities are the controller RPCs the driver implements.
var controllerCapabilities = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
	csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
	csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
	csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
	csi.ControllerServiceCapability_RPC_GET_CAPACITY,
	csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
	csi.ControllerServiceCapability_RPC_GET_VOLUME,
	csi.ControllerServiceCapability_RPC_VOLUME_CONDITION,
	csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
}

// nodeCapabilities are the node RPCs the driver implements.
var nodeCapabilities = []csi.NodeServiceCapability_RPC_Type{
	csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
	csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
	csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
	csi.NodeServiceCapability_RPC_VOLUME_CONDITION,
	csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
}
