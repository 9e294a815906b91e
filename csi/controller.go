package csi

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/hostkeys"
)

const (
	mib = int64(1) << 20
	// defaultVolumeSize is used when a request names no size.
	defaultVolumeSize = int64(1) << 30
)

// ControllerGetCapabilities lists the controller RPCs.
func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, c := range controllerCapabilities {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: c}},
		})
	}
	return resp, nil
}

// requestedSize is the size a capacity range asks for, rounded up to
// whole MiB.
func requestedSize(r *csi.CapacityRange) (int64, error) {
	req, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || limit < 0 {
		return 0, errorf(ErrInvalidArgument, "negative capacity range")
	}
	if limit > 0 && req > limit {
		return 0, errorf(ErrInvalidArgument, "required bytes %d exceed the limit %d", req, limit)
	}
	size := req
	if size == 0 {
		size = defaultVolumeSize
		if limit > 0 && limit < size {
			size = limit
		}
	}
	size = (size + mib - 1) / mib * mib
	if limit > 0 && size > limit {
		return 0, errorf(ErrOutOfRange, "a volume is a whole number of MiB: %d bytes round up to %d, above the limit %d", req, size, limit)
	}
	return size, nil
}

// CreateVolume makes the RBD image (empty, or a clone of a snapshot or a
// volume), then the CachedVolume in the rack of the preferred topology,
// and waits until a cache server serves it. Idempotent by name: the name
// determines both objects' names.
func (d *Driver) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, errorf(ErrInvalidArgument, "a volume name is required")
	}
	if err := validateCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	params, err := parseVolumeParams(req.GetParameters())
	if err != nil {
		return nil, err
	}
	size, err := requestedSize(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	id := newVolumeID(params.CachePool, params.RBDPool, req.GetName())
	if err := checkIDLength(id.String()); err != nil {
		return nil, err
	}
	unlock, err := d.locks.lock(id.String())
	if err != nil {
		return nil, err
	}
	defer unlock()
	log := logr.FromContextOrDiscard(ctx).WithValues("volume", id.String(), "image", id.Image())
	ctx = logr.NewContext(ctx, log)

	src := req.GetVolumeContentSource()
	if cv, err := d.getVolume(ctx, id); err == nil {
		// A retry: the same name must mean the same volume.
		if got := cv.Spec.Size.Value(); got != size {
			return nil, errorf(ErrAlreadyExists, "volume %s exists with %d bytes, %d asked", req.GetName(), got, size)
		}
		cv, err = d.waitApplied(ctx, cv.Name)
		if err != nil {
			return nil, err
		}
		return &csi.CreateVolumeResponse{Volume: d.volumeOf(id, cv, params.Connect, src)}, nil
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}

	rack := d.wantedRack(req.GetAccessibilityRequirements())
	images, err := d.openImages(ctx, params.CachePool, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer images.Close()
	createdImage, err := d.createImage(ctx, images, id, params, uint64(size), src)
	if err != nil {
		return nil, err
	}
	cv, err := d.createCachedVolume(ctx, id, params, size, rack, req)
	if err != nil {
		if createdImage {
			d.rollbackImage(ctx, images, id)
		}
		return nil, err
	}
	cv, err = d.waitApplied(ctx, cv.Name)
	if errors.Is(err, ErrResourceExhausted) {
		// No cache server has room: undo both, the provisioner retries.
		_ = d.ctrl.Client.Delete(ctx, cv)
		if createdImage {
			d.rollbackImage(ctx, images, id)
		}
	}
	if err != nil {
		return nil, err
	}
	log.Info("volume created", "server", cv.Status.Server, "rack", cv.Status.Rack, "size", size)
	return &csi.CreateVolumeResponse{Volume: d.volumeOf(id, cv, params.Connect, src)}, nil
}

// wantedRack is the rack of the first preferred topology (the pod's node
// under WaitForFirstConsumer), else of the first requisite one; empty
// without topology.
func (d *Driver) wantedRack(req *csi.TopologyRequirement) string {
	for _, list := range [][]*csi.Topology{req.GetPreferred(), req.GetRequisite()} {
		for _, t := range list {
			if rack := t.GetSegments()[d.rackLabel]; rack != "" {
				return rack
			}
		}
	}
	return ""
}

// createImage makes the volume's RBD image, or finds it from an earlier
// attempt. Returns whether this call created it (for rollback).
func (d *Driver) createImage(ctx context.Context, images Images, id volumeID, p volumeParams, size uint64, src *csi.VolumeContentSource) (bool, error) {
	if info, err := images.ImageInfo(ctx, id.RBDPool, id.Image()); err == nil {
		switch {
		case info.Size == size:
			return false, nil
		case info.Size < size && src != nil:
			// An earlier attempt cloned but did not grow the clone yet.
			return false, growClone(ctx, images, id, size, info.Size)
		default:
			return false, errorf(ErrAlreadyExists, "RBD image %s/%s exists with %d bytes, %d asked", id.RBDPool, id.Image(), info.Size, size)
		}
	} else if !errors.Is(err, ErrNotFound) {
		return false, errorf(ErrUnavailable, "read RBD image %s/%s: %v", id.RBDPool, id.Image(), err)
	}
	var err error
	switch {
	case src.GetSnapshot() != nil:
		err = d.cloneFromSnapshot(ctx, images, id, p, size, src.GetSnapshot().GetSnapshotId())
	case src.GetVolume() != nil:
		err = d.cloneFromVolume(ctx, images, id, p, size, src.GetVolume().GetVolumeId())
	default:
		err = images.CreateImage(ctx, id.RBDPool, id.Image(), size, p.ImageFeatures)
		if err != nil {
			err = errorf(ErrUnavailable, "create RBD image %s/%s: %v", id.RBDPool, id.Image(), err)
		}
	}
	if err != nil {
		return false, err
	}
	return true, nil
}

// rollbackImage deletes an image this call created; a failure is logged
// (the next attempt finds the image and reuses it).
func (d *Driver) rollbackImage(ctx context.Context, images Images, id volumeID) {
	if err := images.DeleteImage(ctx, id.RBDPool, id.Image()); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "roll back: delete RBD image", "pool", id.RBDPool)
	}
}

// createCachedVolume creates the volume's CachedVolume (or finds the one
// an earlier attempt created).
func (d *Driver) createCachedVolume(ctx context.Context, id volumeID, p volumeParams, size int64, rack string, req *csi.CreateVolumeRequest) (*rcv1.CachedVolume, error) {
	cacheSize := p.CacheSize
	// A byte cache size above the volume's size is capped to it: one
	// StorageClass serves volumes of any size.
	if q, err := resource.ParseQuantity(string(cacheSize)); err == nil && cacheSize != "" && q.Value() > size {
		cacheSize = rcv1.CacheSize(resource.NewQuantity(size, resource.BinarySI).String())
	}
	cv := &rcv1.CachedVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        id.Image(),
			Labels:      map[string]string{managedByLabel: DriverName},
			Annotations: map[string]string{nameAnnotation: req.GetName()},
		},
		Spec: rcv1.CachedVolumeSpec{
			PoolName:       p.CachePool,
			RBD:            rcv1.RBDImage{Pool: p.RBDPool, Image: id.Image()},
			Size:           *resource.NewQuantity(size, resource.BinarySI),
			CacheSize:      cacheSize,
			Rack:           rack,
			WriteMode:      p.WriteMode,
			AllocationMode: p.AllocationMode,
			Policies:       p.Policies,
			// Where the operator keeps the hosts' keys: the Secret the
			// StorageClass's node-stage and node-publish templates name.
			HostKeysSecret: hostkeys.SecretNameForPV(req.GetName()),
		},
	}
	if n := req.GetParameters()[pvcNameParam]; n != "" {
		cv.Annotations[pvcAnnotation] = n
		cv.Annotations[pvcNamespaceAnnotation] = req.GetParameters()[pvcNamespaceParam]
	}
	err := d.ctrl.Client.Create(ctx, cv)
	switch {
	case err == nil:
		return cv, nil
	case apierrors.IsAlreadyExists(err):
		return d.getVolume(ctx, id)
	case apierrors.IsInvalid(err):
		return nil, errorf(ErrInvalidArgument, "CachedVolume %s rejected: %v", cv.Name, err)
	default:
		return nil, errorf(ErrUnavailable, "create CachedVolume %s: %v", cv.Name, err)
	}
}

// DeleteVolume deletes the CachedVolume (its finalizer flushes dirty data
// to Ceph and tears it down), waits until it is gone, then deletes the
// image. An unknown id is success.
func (d *Driver) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, errorf(ErrInvalidArgument, "a volume id is required")
	}
	id, err := parseVolumeID(req.GetVolumeId())
	if err != nil {
		return &csi.DeleteVolumeResponse{}, nil //nolint:nilerr // not ours, or long gone: nothing to delete
	}
	unlock, err := d.locks.lock(id.String())
	if err != nil {
		return nil, err
	}
	defer unlock()
	cv, err := d.getVolume(ctx, id)
	switch {
	case err == nil:
		if err := d.ctrl.Client.Delete(ctx, cv); err != nil && !apierrors.IsNotFound(err) {
			return nil, errorf(ErrUnavailable, "delete CachedVolume %s: %v", cv.Name, err)
		}
		if err := d.waitGone(ctx, cv.Name); err != nil {
			return nil, err
		}
	case !errors.Is(err, ErrNotFound):
		return nil, err
	}
	images, err := d.openImages(ctx, id.CachePool, req.GetSecrets())
	if errors.Is(err, ErrNotFound) {
		// The CachePool is gone, so is the way to its Ceph cluster.
		return nil, errorf(ErrFailedPrecondition, "volume %s: its CachePool %s is gone; delete RBD image %s/%s by hand", id, id.CachePool, id.RBDPool, id.Image())
	}
	if err != nil {
		return nil, err
	}
	defer images.Close()
	if err := images.DeleteImage(ctx, id.RBDPool, id.Image()); err != nil {
		return nil, errorf(ErrUnavailable, "delete RBD image %s/%s: %v", id.RBDPool, id.Image(), err)
	}
	logr.FromContextOrDiscard(ctx).Info("volume deleted", "volume", id.String())
	return &csi.DeleteVolumeResponse{}, nil
}

// listVolumes lists the CachedVolumes the driver made.
func (d *Driver) listVolumes(ctx context.Context) ([]rcv1.CachedVolume, error) {
	var list rcv1.CachedVolumeList
	if err := d.ctrl.Client.List(ctx, &list, client.MatchingLabels{managedByLabel: DriverName}); err != nil {
		return nil, errorf(ErrUnavailable, "list CachedVolumes: %v", err)
	}
	return list.Items, nil
}

// idOf rebuilds a CSI volume's id from its CachedVolume.
func idOf(cv *rcv1.CachedVolume) (volumeID, error) {
	uuid, ok := strings.CutPrefix(cv.Name, imagePrefix)
	if !ok {
		return volumeID{}, fmt.Errorf("CachedVolume %s is not named %s<uuid>", cv.Name, imagePrefix)
	}
	return volumeID{CachePool: cv.Spec.PoolName, RBDPool: cv.Spec.RBD.Pool, UUID: uuid}, nil
}
