package csi

import (
	"context"
	"time"
)

// The driver's outside parts, as small interfaces: cmd/rackcache-csi
// wires the real ones (csi/rbd over go-ceph, csi/nvme over nvme-cli and
// sysfs); the unit tests of pure logic use fakes.

// CephCredentials open a RADOS connection. Key is a cephx secret: never
// logged, never in errors.
type CephCredentials struct {
	Monitors []string
	User     string
	Key      string
}

// Ceph opens connections to a Ceph cluster.
type Ceph interface {
	Connect(ctx context.Context, creds CephCredentials) (Images, error)
}

// ImageInfo is what the driver reads of an RBD image.
type ImageInfo struct {
	Size uint64
}

// SnapshotInfo is what the driver reads of an RBD snapshot.
type SnapshotInfo struct {
	Size    uint64
	Created time.Time
}

// Images manages RBD images over one connection. Not-found errors wrap
// ErrNotFound; a missing object on delete is success.
type Images interface {
	CreateImage(ctx context.Context, pool, name string, size uint64, features []string) error
	ImageInfo(ctx context.Context, pool, name string) (ImageInfo, error)
	ResizeImage(ctx context.Context, pool, name string, size uint64) error
	DeleteImage(ctx context.Context, pool, name string) error
	CreateSnapshot(ctx context.Context, pool, image, snap string) error
	DeleteSnapshot(ctx context.Context, pool, image, snap string) error
	SnapshotInfo(ctx context.Context, pool, image, snap string) (SnapshotInfo, error)
	// CloneImage makes child a clone of parent@snap (clone format 2).
	CloneImage(ctx context.Context, pool, parent, snap, child string, features []string) error
	PoolFreeBytes(ctx context.Context, pool string) (uint64, error)
	// ListImages names the pool's images.
	ListImages(ctx context.Context, pool string) ([]string, error)
	// SetImageMeta and ImageMeta keep a key/value on an image (ErrNotFound
	// for a missing key).
	SetImageMeta(ctx context.Context, pool, image, key, value string) error
	ImageMeta(ctx context.Context, pool, image, key string) (string, error)
	Close()
}

// Portal is one address and port exporting a volume.
type Portal struct{ Address, Port string }

// Attachment is the NVMe/TCP connections to make to one subsystem: one per
// portal (the owner's first), joined by the kernel's native multipath.
type Attachment struct {
	Portals         []Portal
	SubNQN          string
	HostNQN, HostID string
	Connect         ConnectDefaults
	// Keys authenticate the host (and the controller); nil for a pool
	// that does not authenticate hosts.
	Keys *HostKeys
}

// HostKeys are a host's DH-HMAC-CHAP secrets for one volume, and its TLS
// PSK when the pool uses TLS.
type HostKeys struct {
	Host, Ctrl string
	PSK        string
}

// NVMe attaches namespaces with the kernel's initiator.
type NVMe interface {
	// Connect is idempotent: a live controller at a portal is reused;
	// stale ones are removed first. It returns how many portals have a
	// live controller, and why the others do not.
	Connect(ctx context.Context, a Attachment) (int, error)
	// Disconnect removes every controller of the subsystem (none: success).
	Disconnect(ctx context.Context, subNQN string) error
	// Device finds the namespace's block device (/dev/nvmeXnY) in sysfs;
	// ErrNotFound when it is not there (yet).
	Device(subNQN, nsUUID string) (string, error)
	// Live reports whether a controller of the subsystem is live.
	Live(subNQN string) bool
	// Rescan asks the subsystem's controllers to read their namespaces
	// again (a grown namespace's new size).
	Rescan(subNQN string) error
	// SetKeys gives the subsystem's live controllers new keys where theirs
	// differ (the kernel re-authenticates, I/O going on); it returns how
	// many changed.
	SetKeys(subNQN string, keys HostKeys) (int, error)
	// InsertPSK puts the host's TLS PSK for the subsystem into the
	// kernel's .nvme keyring (replacing an older one), where tlshd takes
	// it for the next TLS handshake.
	InsertPSK(ctx context.Context, hostNQN, subNQN, psk string) error
}
