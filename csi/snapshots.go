package csi

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// A snapshot is its own RBD image, as in ceph-csi: the source image gets
// a temporary snapshot, which is cloned (format 2) into csi-snap-<uuid>,
// which gets its own snapshot csi-snap-<uuid>; the temporary one is then
// removed. Volumes and snapshots can so be deleted in any order. The
// source volume's cache is flushed to Ceph first, so the snapshot holds
// every write acknowledged before CreateSnapshot.
const (
	// sourceMeta is the image metadata key of a snapshot image that
	// names its source volume id.
	sourceMeta = "csi.rackcache.io/source-volume"
	// tmpSnapPrefix names the temporary snapshots on source images.
	tmpSnapPrefix = "csi-tmp-"
)

// CreateSnapshot flushes the source volume's cache, then snapshots its
// image. Idempotent by name.
func (d *Driver) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if err := required(
		need{"a snapshot name", req.GetName() != ""},
		need{"a source volume id", req.GetSourceVolumeId() != ""},
	); err != nil {
		return nil, err
	}
	src, err := parseVolumeID(req.GetSourceVolumeId())
	if err != nil {
		return nil, err
	}
	id := newSnapshotID(src, req.GetName())
	if err := checkIDLength(id.String()); err != nil {
		return nil, err
	}
	unlock, err := d.locks.lock(id.Snapshot())
	if err != nil {
		return nil, err
	}
	defer unlock()
	images, err := d.openImages(ctx, src.CachePool, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer images.Close()

	// A retry, or the name already taken by another source's snapshot.
	if owner, err := images.ImageMeta(ctx, src.RBDPool, id.Snapshot(), sourceMeta); err == nil {
		if owner != src.String() {
			return nil, errorf(ErrAlreadyExists, "snapshot %s exists for volume %s", req.GetName(), owner)
		}
		if err := images.CreateSnapshot(ctx, src.RBDPool, id.Snapshot(), id.Snapshot()); err != nil {
			return nil, errorf(ErrUnavailable, "snapshot RBD image %s/%s: %v", src.RBDPool, id.Snapshot(), err)
		}
		return d.snapshotResponse(ctx, images, id)
	} else if !errors.Is(err, ErrNotFound) {
		return nil, errorf(ErrUnavailable, "read RBD image %s/%s: %v", src.RBDPool, id.Snapshot(), err)
	}

	cv, err := d.getVolume(ctx, src)
	if err != nil {
		return nil, err
	}
	release, err := d.flushVolume(ctx, cv, id.SnapUUID)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := copyImage(ctx, images, src.RBDPool, src.Image(), id.Snapshot(), tmpSnapPrefix+id.SnapUUID, []string{"layering"}); err != nil {
		return nil, err
	}
	if err := images.SetImageMeta(ctx, src.RBDPool, id.Snapshot(), sourceMeta, src.String()); err != nil {
		return nil, errorf(ErrUnavailable, "label snapshot image %s/%s: %v", src.RBDPool, id.Snapshot(), err)
	}
	if err := images.CreateSnapshot(ctx, src.RBDPool, id.Snapshot(), id.Snapshot()); err != nil {
		return nil, errorf(ErrUnavailable, "snapshot RBD image %s/%s: %v", src.RBDPool, id.Snapshot(), err)
	}
	logr.FromContextOrDiscard(ctx).Info("snapshot created", "snapshot", id.String(), "source", src.String())
	return d.snapshotResponse(ctx, images, id)
}

// copyImage clones image parent (as it is now) into child through a
// temporary snapshot, removed afterwards (clone format 2 keeps the child
// valid; Ceph trashes the snapshot until the child no longer needs it).
func copyImage(ctx context.Context, images Images, pool, parent, child, tmpSnap string, features []string) error {
	if err := images.CreateSnapshot(ctx, pool, parent, tmpSnap); err != nil {
		return errorf(ErrUnavailable, "snapshot RBD image %s/%s: %v", pool, parent, err)
	}
	if err := images.CloneImage(ctx, pool, parent, tmpSnap, child, features); err != nil {
		return errorf(ErrUnavailable, "clone %s/%s@%s to %s: %v", pool, parent, tmpSnap, child, err)
	}
	if err := images.DeleteSnapshot(ctx, pool, parent, tmpSnap); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "remove the temporary snapshot (left for a later cleanup)", "image", parent, "snapshot", tmpSnap)
	}
	return nil
}

func (d *Driver) snapshotResponse(ctx context.Context, images Images, id snapshotID) (*csi.CreateSnapshotResponse, error) {
	s, err := d.snapshotOf(ctx, images, id)
	if err != nil {
		return nil, err
	}
	return &csi.CreateSnapshotResponse{Snapshot: s}, nil
}

// snapshotOf reads a snapshot; ErrNotFound when it does not exist.
func (d *Driver) snapshotOf(ctx context.Context, images Images, id snapshotID) (*csi.Snapshot, error) {
	info, err := images.SnapshotInfo(ctx, id.RBDPool, id.Snapshot(), id.Snapshot())
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, errorf(ErrNotFound, "snapshot %s does not exist", id)
		}
		return nil, errorf(ErrUnavailable, "read snapshot %s/%s@%s: %v", id.RBDPool, id.Snapshot(), id.Snapshot(), err)
	}
	return &csi.Snapshot{
		SnapshotId:     id.String(),
		SourceVolumeId: id.volumeID.String(),
		SizeBytes:      int64(info.Size),
		CreationTime:   timestamppb.New(info.Created),
		ReadyToUse:     true,
	}, nil
}

// DeleteSnapshot removes the snapshot image; an unknown id is success.
func (d *Driver) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, errorf(ErrInvalidArgument, "a snapshot id is required")
	}
	id, err := parseSnapshotID(req.GetSnapshotId())
	if err != nil {
		return &csi.DeleteSnapshotResponse{}, nil //nolint:nilerr // not ours: nothing to delete
	}
	unlock, err := d.locks.lock(id.Snapshot())
	if err != nil {
		return nil, err
	}
	defer unlock()
	images, err := d.openImages(ctx, id.CachePool, req.GetSecrets())
	if errors.Is(err, ErrNotFound) {
		return nil, errorf(ErrFailedPrecondition, "snapshot %s: its CachePool %s is gone; delete RBD image %s/%s by hand", id, id.CachePool, id.RBDPool, id.Snapshot())
	}
	if err != nil {
		return nil, err
	}
	defer images.Close()
	if err := images.DeleteSnapshot(ctx, id.RBDPool, id.Snapshot(), id.Snapshot()); err != nil && !errors.Is(err, ErrNotFound) {
		return nil, errorf(ErrUnavailable, "delete snapshot %s/%s@%s: %v", id.RBDPool, id.Snapshot(), id.Snapshot(), err)
	}
	if err := images.DeleteImage(ctx, id.RBDPool, id.Snapshot()); err != nil {
		return nil, errorf(ErrUnavailable, "delete RBD image %s/%s: %v", id.RBDPool, id.Snapshot(), err)
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots lists one snapshot (by id), the snapshots of a volume, or
// all snapshots in the RBD pools of the driver's volumes.
func (d *Driver) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	var found []*csi.Snapshot
	switch {
	case req.GetSnapshotId() != "":
		id, err := parseSnapshotID(req.GetSnapshotId())
		if err != nil {
			return &csi.ListSnapshotsResponse{}, nil //nolint:nilerr // an id not ours lists nothing
		}
		s, err := d.readSnapshot(ctx, id, req.GetSecrets())
		if errors.Is(err, ErrNotFound) {
			return &csi.ListSnapshotsResponse{}, nil
		}
		if err != nil {
			return nil, err
		}
		found = append(found, s)
	default:
		var err error
		found, err = d.scanSnapshots(ctx, req.GetSourceVolumeId(), req.GetSecrets())
		if err != nil {
			return nil, err
		}
	}
	page, next, err := paginate(found, req.GetStartingToken(), req.GetMaxEntries())
	if err != nil {
		return nil, err
	}
	resp := &csi.ListSnapshotsResponse{NextToken: next}
	for _, s := range page {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: s})
	}
	return resp, nil
}

func (d *Driver) readSnapshot(ctx context.Context, id snapshotID, secrets map[string]string) (*csi.Snapshot, error) {
	images, err := d.openImages(ctx, id.CachePool, secrets)
	if err != nil {
		return nil, err
	}
	defer images.Close()
	return d.snapshotOf(ctx, images, id)
}

// scanSnapshots lists the snapshot images in the (cache pool, RBD pool)
// pairs of the driver's volumes, optionally only those of one source.
func (d *Driver) scanSnapshots(ctx context.Context, source string, secrets map[string]string) ([]*csi.Snapshot, error) {
	pairs := map[volumeID]bool{}
	if source != "" {
		src, err := parseVolumeID(source)
		if err != nil {
			return nil, nil //nolint:nilerr // an id not ours has no snapshots
		}
		pairs[volumeID{CachePool: src.CachePool, RBDPool: src.RBDPool}] = true
	} else {
		vols, err := d.listVolumes(ctx)
		if err != nil {
			return nil, err
		}
		for i := range vols {
			pairs[volumeID{CachePool: vols[i].Spec.PoolName, RBDPool: vols[i].Spec.RBD.Pool}] = true
		}
	}
	var out []*csi.Snapshot
	for pair := range pairs {
		images, err := d.openImages(ctx, pair.CachePool, secrets)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		found, err := d.snapshotsIn(ctx, images, pair, source)
		images.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SnapshotId < out[j].SnapshotId })
	return out, nil
}

func (d *Driver) snapshotsIn(ctx context.Context, images Images, pair volumeID, source string) ([]*csi.Snapshot, error) {
	names, err := images.ListImages(ctx, pair.RBDPool)
	if err != nil {
		return nil, errorf(ErrUnavailable, "list RBD pool %s: %v", pair.RBDPool, err)
	}
	var out []*csi.Snapshot
	for _, name := range names {
		snapUUID, ok := strings.CutPrefix(name, snapshotPrefix)
		if !ok {
			continue
		}
		owner, err := images.ImageMeta(ctx, pair.RBDPool, name, sourceMeta)
		if err != nil {
			continue // being created or deleted
		}
		src, err := parseVolumeID(owner)
		if err != nil || src.CachePool != pair.CachePool || (source != "" && owner != source) {
			continue
		}
		s, err := d.snapshotOf(ctx, images, snapshotID{volumeID: src, SnapUUID: snapUUID})
		if err != nil {
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

// paginate cuts a page out of a listing; the token is the index of the
// next entry. A token that does not fit is Aborted, as the spec asks.
func paginate[T any](all []T, token string, max int32) ([]T, string, error) {
	start := 0
	if token != "" {
		n, err := strconv.Atoi(token)
		if err != nil || n < 0 || n > len(all) {
			return nil, "", errorf(ErrBusy, "starting token %q does not fit a listing of %d entries", token, len(all))
		}
		start = n
	}
	if max < 0 {
		return nil, "", errorf(ErrInvalidArgument, "max entries %d is negative", max)
	}
	end := len(all)
	if max > 0 && start+int(max) < end {
		end = start + int(max)
	}
	next := ""
	if end < len(all) {
		next = strconv.Itoa(end)
	}
	return all[start:end], next, nil
}

// cloneFromSnapshot makes the volume's image a clone of a snapshot.
func (d *Driver) cloneFromSnapshot(ctx context.Context, images Images, id volumeID, p volumeParams, size uint64, snapID string) error {
	snap, err := parseSnapshotID(snapID)
	if err != nil {
		return err
	}
	if snap.CachePool != id.CachePool || snap.RBDPool != id.RBDPool {
		return errorf(ErrInvalidArgument, "snapshot %s is in cache pool %s, RBD pool %s; the volume asks for %s, %s", snapID, snap.CachePool, snap.RBDPool, id.CachePool, id.RBDPool)
	}
	info, err := images.SnapshotInfo(ctx, snap.RBDPool, snap.Snapshot(), snap.Snapshot())
	if errors.Is(err, ErrNotFound) {
		return errorf(ErrNotFound, "snapshot %s does not exist", snapID)
	}
	if err != nil {
		return errorf(ErrUnavailable, "read snapshot %s: %v", snapID, err)
	}
	if size < info.Size {
		return errorf(ErrOutOfRange, "the volume (%d bytes) is smaller than snapshot %s (%d bytes)", size, snapID, info.Size)
	}
	if err := images.CloneImage(ctx, id.RBDPool, snap.Snapshot(), snap.Snapshot(), id.Image(), p.ImageFeatures); err != nil {
		return errorf(ErrUnavailable, "clone snapshot %s into %s/%s: %v", snapID, id.RBDPool, id.Image(), err)
	}
	return growClone(ctx, images, id, size, info.Size)
}

// cloneFromVolume makes the volume's image a copy of another volume's,
// after flushing that volume's cache.
func (d *Driver) cloneFromVolume(ctx context.Context, images Images, id volumeID, p volumeParams, size uint64, srcID string) error {
	src, err := parseVolumeID(srcID)
	if err != nil {
		return err
	}
	if src.CachePool != id.CachePool || src.RBDPool != id.RBDPool {
		return errorf(ErrInvalidArgument, "volume %s is in cache pool %s, RBD pool %s; the clone asks for %s, %s", srcID, src.CachePool, src.RBDPool, id.CachePool, id.RBDPool)
	}
	cv, err := d.getVolume(ctx, src)
	if err != nil {
		return err
	}
	if got := uint64(cv.Spec.Size.Value()); size < got {
		return errorf(ErrOutOfRange, "the clone (%d bytes) is smaller than volume %s (%d bytes)", size, srcID, got)
	}
	release, err := d.flushVolume(ctx, cv, "clone-"+id.UUID)
	if err != nil {
		return err
	}
	err = copyImage(ctx, images, id.RBDPool, src.Image(), id.Image(), tmpSnapPrefix+id.UUID, p.ImageFeatures)
	release()
	if err != nil {
		return err
	}
	return growClone(ctx, images, id, size, uint64(cv.Spec.Size.Value()))
}

// growClone resizes a clone to the size asked when it is larger than its
// source.
func growClone(ctx context.Context, images Images, id volumeID, size, srcSize uint64) error {
	if size == srcSize {
		return nil
	}
	if err := images.ResizeImage(ctx, id.RBDPool, id.Image(), size); err != nil {
		return errorf(ErrUnavailable, "grow clone %s/%s to %d bytes: %v", id.RBDPool, id.Image(), size, err)
	}
	return nil
}
