//go:build !cgo

package rbd

import "context"

// Conn is unusable without cgo: Connect fails with ErrNoLibrbd.
type Conn struct{}

// Connect fails: this binary has no librbd.
func Connect(context.Context, Credentials) (*Conn, error) { return nil, ErrNoLibrbd }

func (*Conn) Close() {}

func (*Conn) CreateImage(context.Context, string, string, uint64, []string) error { return ErrNoLibrbd }

func (*Conn) ImageInfo(context.Context, string, string) (ImageInfo, error) {
	return ImageInfo{}, ErrNoLibrbd
}

func (*Conn) ResizeImage(context.Context, string, string, uint64) error { return ErrNoLibrbd }

func (*Conn) DeleteImage(context.Context, string, string) error { return ErrNoLibrbd }

func (*Conn) CreateSnapshot(context.Context, string, string, string) error { return ErrNoLibrbd }

func (*Conn) DeleteSnapshot(context.Context, string, string, string) error { return ErrNoLibrbd }

func (*Conn) SnapshotInfo(context.Context, string, string, string) (SnapshotInfo, error) {
	return SnapshotInfo{}, ErrNoLibrbd
}

func (*Conn) CloneImage(context.Context, string, string, string, string, []string) error {
	return ErrNoLibrbd
}

func (*Conn) ListImages(context.Context, string) ([]string, error) { return nil, ErrNoLibrbd }

func (*Conn) SetImageMeta(context.Context, string, string, string, string) error { return ErrNoLibrbd }

func (*Conn) ImageMeta(context.Context, string, string, string) (string, error) {
	return "", ErrNoLibrbd
}

func (*Conn) PoolFreeBytes(context.Context, string) (uint64, error) { return 0, ErrNoLibrbd }
