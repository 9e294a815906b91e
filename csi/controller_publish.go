package csi

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// ControllerPublishVolume lets the node's host NQN connect: it is added
// to the CachedVolume's allowed hosts, and the call returns once the
// dataplane enforces the new list.
func (d *Driver) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if err := required(
		need{"a volume id", req.GetVolumeId() != ""},
		need{"a node id", req.GetNodeId() != ""},
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
	node, hostNQN, err := parseNodeID(req.GetNodeId())
	if err != nil {
		return nil, err
	}
	unlock, err := d.locks.lock(id.String())
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := d.getVolume(ctx, id); err != nil {
		return nil, err
	}
	cv, err := d.updateVolume(ctx, id.Image(), func(cv *rcv1.CachedVolume) (bool, error) {
		if slices.Contains(cv.Spec.AllowedHosts, hostNQN) {
			return false, nil
		}
		// One node at a time: a second host would mount the same
		// filesystem twice.
		if len(cv.Spec.AllowedHosts) > 0 {
			return false, errorf(ErrFailedPrecondition, "volume %s is published to %v; unpublish it there first", id, cv.Spec.AllowedHosts)
		}
		cv.Spec.AllowedHosts = append(cv.Spec.AllowedHosts, hostNQN)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if cv, err = d.waitApplied(ctx, cv.Name); err != nil {
		return nil, err
	}
	logr.FromContextOrDiscard(ctx).Info("volume published", "volume", id.String(), "node", node, "hostNQN", hostNQN,
		"address", cv.Status.Address, "port", cv.Status.Port)
	pc := map[string]string{
		publishHostNQN: hostNQN,
		ctxAddress:     cv.Status.Address,
		ctxPort:        strconv.Itoa(int(cv.Status.Port)),
	}
	if paths := pathsContext(cv); paths != "" {
		pc[ctxPaths] = paths
	}
	return &csi.ControllerPublishVolumeResponse{PublishContext: pc}, nil
}

// pathsContext is the volume's portals as ctxPaths carries them.
func pathsContext(cv *rcv1.CachedVolume) string {
	var out []string
	for _, p := range cv.Status.Paths {
		if p.Address != "" && p.Port != 0 {
			out = append(out, net.JoinHostPort(p.Address, strconv.Itoa(int(p.Port))))
		}
	}
	return strings.Join(out, ",")
}

// ControllerUnpublishVolume removes the node's host NQN; the dataplane
// then refuses it and ends its live connections. Returns once that is
// applied. An unknown volume or node is success.
func (d *Driver) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, errorf(ErrInvalidArgument, "a volume id is required")
	}
	id, err := parseVolumeID(req.GetVolumeId())
	if err != nil {
		return &csi.ControllerUnpublishVolumeResponse{}, nil //nolint:nilerr // not ours: not published
	}
	var hostNQN string
	if req.GetNodeId() != "" {
		if _, hostNQN, err = parseNodeID(req.GetNodeId()); err != nil {
			return &csi.ControllerUnpublishVolumeResponse{}, nil //nolint:nilerr // an unknown node holds nothing
		}
	}
	unlock, err := d.locks.lock(id.String())
	if err != nil {
		return nil, err
	}
	defer unlock()
	cv, err := d.updateVolume(ctx, id.Image(), func(cv *rcv1.CachedVolume) (bool, error) {
		kept := slices.DeleteFunc(slices.Clone(cv.Spec.AllowedHosts), func(h string) bool {
			return hostNQN == "" || h == hostNQN // no node id: from every node
		})
		if len(kept) == len(cv.Spec.AllowedHosts) {
			return false, nil
		}
		cv.Spec.AllowedHosts = kept
		return true, nil
	})
	if isNotFound(err) {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if cv.Status.ObservedGeneration < cv.Generation {
		if _, err := d.waitApplied(ctx, cv.Name); err != nil {
			return nil, err
		}
	}
	logr.FromContextOrDiscard(ctx).Info("volume unpublished", "volume", id.String(), "hostNQN", hostNQN)
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}
