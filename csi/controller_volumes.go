package csi

import (
	"context"
	"sort"

	"github.com/container-storage-interface/spec/lib/go/csi"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// ValidateVolumeCapabilities confirms the capabilities a volume supports.
func (d *Driver) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if err := required(
		need{"a volume id", req.GetVolumeId() != ""},
		need{"a list of volume capabilities", len(req.GetVolumeCapabilities()) != 0},
	); err != nil {
		return nil, err
	}
	id, err := parseVolumeID(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if _, err := d.getVolume(ctx, id); err != nil {
		return nil, err
	}
	if err := validateCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil //nolint:nilerr // unsupported is an answer
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// GetCapacity is the Ceph pool's free space where a volume can get a
// cache: in the rack of the topology segment asked (or anywhere), some
// ready server of the CachePool must have free cache; otherwise 0.
func (d *Driver) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	if len(req.GetVolumeCapabilities()) > 0 {
		if err := validateCapabilities(req.GetVolumeCapabilities()); err != nil {
			return &csi.GetCapacityResponse{}, nil //nolint:nilerr // no capacity for what is not supported
		}
	}
	if len(req.GetParameters()) == 0 {
		// Capacity is per StorageClass (its CachePool and RBD pool); a
		// request naming none gets 0, "unknown", as the spec allows.
		return &csi.GetCapacityResponse{}, nil
	}
	params, err := parseVolumeParams(req.GetParameters())
	if err != nil {
		return nil, err
	}
	pool, err := d.cachePool(ctx, params.CachePool)
	if err != nil {
		return nil, err
	}
	rack := req.GetAccessibleTopology().GetSegments()[d.rackLabel]
	if !hasFreeCache(pool, rack) {
		return &csi.GetCapacityResponse{AvailableCapacity: 0}, nil
	}
	images, err := d.openImages(ctx, params.CachePool, nil)
	if err != nil {
		return nil, err
	}
	defer images.Close()
	free, err := images.PoolFreeBytes(ctx, params.RBDPool)
	if err != nil {
		return nil, errorf(ErrUnavailable, "read RBD pool %s's free space: %v", params.RBDPool, err)
	}
	return &csi.GetCapacityResponse{AvailableCapacity: int64(free)}, nil
}

// hasFreeCache: a ready server of the pool (in rack, when given) has
// cache left to allocate.
func hasFreeCache(pool *rcv1.CachePool, rack string) bool {
	for _, s := range pool.Status.Servers {
		if !s.Ready || (rack != "" && s.Rack != rack) {
			continue
		}
		if s.Capacity != nil && s.Allocated != nil && s.Capacity.Cmp(*s.Allocated) > 0 {
			return true
		}
		if s.Capacity != nil && s.Allocated == nil && s.Capacity.Sign() > 0 {
			return true
		}
	}
	return false
}

// ListVolumes lists the driver's volumes with their condition.
func (d *Driver) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	vols, err := d.listVolumes(ctx)
	if err != nil {
		return nil, err
	}
	sort.Slice(vols, func(i, j int) bool { return vols[i].Name < vols[j].Name })
	page, next, err := paginate(vols, req.GetStartingToken(), req.GetMaxEntries())
	if err != nil {
		return nil, err
	}
	resp := &csi.ListVolumesResponse{NextToken: next}
	for i := range page {
		id, err := idOf(&page[i])
		if err != nil {
			continue
		}
		resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{
			Volume: d.volumeOf(id, &page[i], nil, nil),
			Status: &csi.ListVolumesResponse_VolumeStatus{
				PublishedNodeIds: nil,
				VolumeCondition:  volumeCondition(&page[i]),
			},
		})
	}
	return resp, nil
}

// ControllerGetVolume reads one volume and its condition.
func (d *Driver) ControllerGetVolume(ctx context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, errorf(ErrInvalidArgument, "a volume id is required")
	}
	id, err := parseVolumeID(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	cv, err := d.getVolume(ctx, id)
	if err != nil {
		return nil, err
	}
	return &csi.ControllerGetVolumeResponse{
		Volume: d.volumeOf(id, cv, nil, nil),
		Status: &csi.ControllerGetVolumeResponse_VolumeStatus{VolumeCondition: volumeCondition(cv)},
	}, nil
}

// volumeCondition is abnormal unless the volume is served (Ready).
func volumeCondition(cv *rcv1.CachedVolume) *csi.VolumeCondition {
	if cv.Status.Phase == rcv1.VolumeReady {
		return &csi.VolumeCondition{Abnormal: false, Message: "served by cache server " + cv.Status.Server}
	}
	return &csi.VolumeCondition{Abnormal: true, Message: "phase " + string(cv.Status.Phase) + ": " + readyMessage(cv)}
}
