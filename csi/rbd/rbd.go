// Package rbd manages the RBD images of CSI volumes with go-ceph (librbd):
// create, resize, delete, snapshots, format-2 clones, image metadata.
// It needs cgo and librbd; a build without cgo (the node plugin, which
// never touches images) gets ErrNoLibrbd from every call.
package rbd

import (
	"errors"
	"time"
)

// Sentinel errors.
var (
	// ErrNotFound: the pool, image, snapshot or metadata key does not exist.
	ErrNotFound = errors.New("not found")
	// ErrNoLibrbd: this binary was built without cgo.
	ErrNoLibrbd = errors.New("built without librbd (cgo): RBD images cannot be managed by this binary")
)

// Credentials open a connection. Key is a cephx secret: it is never
// logged and never part of an error.
type Credentials struct {
	Monitors []string
	User     string
	Key      string
}

// ImageInfo is what callers read of an image.
type ImageInfo struct {
	Size uint64
}

// SnapshotInfo is what callers read of a snapshot.
type SnapshotInfo struct {
	Size    uint64
	Created time.Time
}
