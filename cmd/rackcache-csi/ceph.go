package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/rackcache/rackcache/csi"
	"github.com/rackcache/rackcache/csi/rbd"
)

// cephConnector opens go-ceph connections (csi/rbd) for the controller.
type cephConnector struct{}

func (cephConnector) Connect(ctx context.Context, c csi.CephCredentials) (csi.Images, error) {
	conn, err := rbd.Connect(ctx, rbd.Credentials{Monitors: c.Monitors, User: c.User, Key: c.Key})
	if err != nil {
		return nil, err
	}
	return images{conn}, nil
}

// images adapts *rbd.Conn to csi.Images: its sentinel errors become the
// driver's.
type images struct{ c *rbd.Conn }

func mapErr(err error) error {
	if errors.Is(err, rbd.ErrNotFound) {
		return fmt.Errorf("%w: %w", csi.ErrNotFound, err)
	}
	return err
}

func (i images) CreateImage(ctx context.Context, pool, name string, size uint64, features []string) error {
	return mapErr(i.c.CreateImage(ctx, pool, name, size, features))
}

func (i images) ImageInfo(ctx context.Context, pool, name string) (csi.ImageInfo, error) {
	info, err := i.c.ImageInfo(ctx, pool, name)
	if err != nil {
		return csi.ImageInfo{}, mapErr(err)
	}
	return csi.ImageInfo{Size: info.Size}, nil
}

func (i images) ResizeImage(ctx context.Context, pool, name string, size uint64) error {
	return mapErr(i.c.ResizeImage(ctx, pool, name, size))
}

func (i images) DeleteImage(ctx context.Context, pool, name string) error {
	return mapErr(i.c.DeleteImage(ctx, pool, name))
}

func (i images) CreateSnapshot(ctx context.Context, pool, image, snap string) error {
	return mapErr(i.c.CreateSnapshot(ctx, pool, image, snap))
}

func (i images) DeleteSnapshot(ctx context.Context, pool, image, snap string) error {
	return mapErr(i.c.DeleteSnapshot(ctx, pool, image, snap))
}

func (i images) SnapshotInfo(ctx context.Context, pool, image, snap string) (csi.SnapshotInfo, error) {
	info, err := i.c.SnapshotInfo(ctx, pool, image, snap)
	if err != nil {
		return csi.SnapshotInfo{}, mapErr(err)
	}
	return csi.SnapshotInfo{Size: info.Size, Created: info.Created}, nil
}

func (i images) CloneImage(ctx context.Context, pool, parent, snap, child string, features []string) error {
	return mapErr(i.c.CloneImage(ctx, pool, parent, snap, child, features))
}

func (i images) PoolFreeBytes(ctx context.Context, pool string) (uint64, error) {
	free, err := i.c.PoolFreeBytes(ctx, pool)
	return free, mapErr(err)
}

func (i images) ListImages(ctx context.Context, pool string) ([]string, error) {
	names, err := i.c.ListImages(ctx, pool)
	return names, mapErr(err)
}

func (i images) SetImageMeta(ctx context.Context, pool, image, key, value string) error {
	return mapErr(i.c.SetImageMeta(ctx, pool, image, key, value))
}

func (i images) ImageMeta(ctx context.Context, pool, image, key string) (string, error) {
	v, err := i.c.ImageMeta(ctx, pool, image, key)
	return v, mapErr(err)
}

func (i images) Close() { i.c.Close() }
