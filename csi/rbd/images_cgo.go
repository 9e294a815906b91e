//go:build cgo

package rbd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ceph/go-ceph/rados"
	librbd "github.com/ceph/go-ceph/rbd"
)

// imageOptions are the options of a new image: its features and, for a
// clone, clone format 2 (a clone does not need its parent snapshot
// protected, and the snapshot can be removed while clones live: Ceph
// moves it to the trash).
func imageOptions(features []string, clone bool) (*librbd.ImageOptions, error) {
	opts := librbd.NewRbdImageOptions()
	fs := librbd.FeatureSetFromNames(features)
	if len(fs.Names()) != len(features) {
		opts.Destroy()
		return nil, fmt.Errorf("unknown RBD image feature in %v", features)
	}
	if err := opts.SetUint64(librbd.ImageOptionFeatures, uint64(fs)); err != nil {
		opts.Destroy()
		return nil, err
	}
	if clone {
		if err := opts.SetUint64(librbd.ImageOptionCloneFormat, 2); err != nil {
			opts.Destroy()
			return nil, err
		}
	}
	return opts, nil
}

// CreateImage creates an image of size bytes with features.
func (c *Conn) CreateImage(ctx context.Context, pool, name string, size uint64, features []string) error {
	opts, err := imageOptions(features, false)
	if err != nil {
		return err
	}
	defer opts.Destroy()
	return c.do(ctx, pool, func(io *rados.IOContext) error {
		return librbd.CreateImage(io, name, size, opts)
	})
}

// ImageInfo reads an image's size.
func (c *Conn) ImageInfo(ctx context.Context, pool, name string) (ImageInfo, error) {
	var info ImageInfo
	err := c.withImage(ctx, pool, name, func(img *librbd.Image) error {
		size, err := img.GetSize()
		info.Size = size
		return err
	})
	return info, err
}

// ResizeImage grows an image; shrinking is refused.
func (c *Conn) ResizeImage(ctx context.Context, pool, name string, size uint64) error {
	return c.withImage(ctx, pool, name, func(img *librbd.Image) error {
		cur, err := img.GetSize()
		if err != nil {
			return err
		}
		if size < cur {
			return fmt.Errorf("image %s/%s has %d bytes: shrinking to %d is refused", pool, name, cur, size)
		}
		if size == cur {
			return nil
		}
		return img.Resize(size)
	})
}

// DeleteImage removes an image (missing: success). An image that still
// has snapshots or clone children (busy) is moved to the trash instead, as
// ceph-csi does: Ceph keeps it as long as a clone needs it.
func (c *Conn) DeleteImage(ctx context.Context, pool, name string) error {
	err := c.do(ctx, pool, func(io *rados.IOContext) error {
		return librbd.RemoveImage(io, name)
	})
	if err == nil || errors.Is(err, ErrNotFound) {
		return nil
	}
	trashErr := c.withImage(ctx, pool, name, func(img *librbd.Image) error {
		return img.Trash(0)
	})
	if trashErr == nil || errors.Is(trashErr, ErrNotFound) {
		return nil
	}
	return fmt.Errorf("remove image %s/%s: %w; move it to the trash: %w", pool, name, err, trashErr)
}

// CreateSnapshot snapshots an image; an existing snapshot of that name is
// success.
func (c *Conn) CreateSnapshot(ctx context.Context, pool, image, snap string) error {
	return c.withImage(ctx, pool, image, func(img *librbd.Image) error {
		if _, err := img.CreateSnapshot(snap); err != nil && !errors.Is(err, librbd.ErrExist) {
			return err
		}
		return nil
	})
}

// DeleteSnapshot removes a snapshot (missing: success); one with clone
// children goes to the trash (clone format 2).
func (c *Conn) DeleteSnapshot(ctx context.Context, pool, image, snap string) error {
	err := c.withImage(ctx, pool, image, func(img *librbd.Image) error {
		return img.GetSnapshot(snap).Remove()
	})
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// SnapshotInfo reads a snapshot's size and creation time.
func (c *Conn) SnapshotInfo(ctx context.Context, pool, image, snap string) (SnapshotInfo, error) {
	var info SnapshotInfo
	err := c.withImage(ctx, pool, image, func(img *librbd.Image) error {
		snaps, err := img.GetSnapshotNames()
		if err != nil {
			return err
		}
		for _, s := range snaps {
			if s.Name != snap {
				continue
			}
			ts, err := img.GetSnapTimestamp(s.Id)
			if err != nil {
				return err
			}
			info = SnapshotInfo{Size: s.Size, Created: time.Unix(ts.Sec, ts.Nsec)}
			return nil
		}
		return fmt.Errorf("%w: snapshot %s@%s", ErrNotFound, image, snap)
	})
	return info, err
}

// CloneImage makes child a format-2 clone of parent@snap.
func (c *Conn) CloneImage(ctx context.Context, pool, parent, snap, child string, features []string) error {
	opts, err := imageOptions(features, true)
	if err != nil {
		return err
	}
	defer opts.Destroy()
	return c.do(ctx, pool, func(io *rados.IOContext) error {
		err := librbd.CloneImage(io, parent, snap, io, child, opts)
		if errors.Is(err, librbd.ErrExist) {
			return nil // a retry: the clone is there
		}
		return err
	})
}

// ListImages names a pool's images.
func (c *Conn) ListImages(ctx context.Context, pool string) ([]string, error) {
	var names []string
	err := c.do(ctx, pool, func(io *rados.IOContext) error {
		var err error
		names, err = librbd.GetImageNames(io)
		return err
	})
	return names, err
}

// SetImageMeta sets a metadata key of an image.
func (c *Conn) SetImageMeta(ctx context.Context, pool, image, key, value string) error {
	return c.withImage(ctx, pool, image, func(img *librbd.Image) error {
		return img.SetMetadata(key, value)
	})
}

// ImageMeta reads a metadata key of an image (ErrNotFound when absent).
func (c *Conn) ImageMeta(ctx context.Context, pool, image, key string) (string, error) {
	var v string
	err := c.withImage(ctx, pool, image, func(img *librbd.Image) error {
		var err error
		v, err = img.GetMetadata(key)
		return err
	})
	return v, err
}

// PoolFreeBytes is the cluster's raw free space (rados_cluster_stat, what
// a user with `profile rbd` may read); replication divides what a pool
// can store of it.
func (c *Conn) PoolFreeBytes(ctx context.Context, pool string) (uint64, error) {
	if _, err := c.ioctx(pool); err != nil {
		return 0, err
	}
	var free uint64
	err := run(ctx, func() error {
		st, err := c.conn.GetClusterStats()
		free = st.Kb_avail * 1024
		return err
	})
	return free, err
}
