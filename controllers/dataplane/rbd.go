package dataplane

import "context"

// Ceph RBD: a registered cluster connection, and bdevs on its images.

// RbdCluster is bdev_rbd_register_cluster's parameters. Either MonHost and
// Key (what the operator has from Rook's ConfigMap and Secrets) or a
// ConfigFile and KeyFile on the dataplane's host.
type RbdCluster struct {
	Name string
	// UserID is the cephx user without "client." (default admin).
	UserID  string
	MonHost string
	// Key is the user's cephx key; it never appears in errors or logs.
	Key        Secret
	ConfigFile string
	KeyFile    string
}

func (p RbdCluster) params() map[string]any {
	m := map[string]any{"name": p.Name}
	if p.UserID != "" {
		m["user_id"] = p.UserID
	}
	cp := map[string]string{}
	if p.MonHost != "" {
		cp["mon_host"] = p.MonHost
	}
	if p.Key != "" {
		cp["key"] = string(p.Key)
	}
	if len(cp) > 0 {
		m["config_param"] = cp
	}
	if p.ConfigFile != "" {
		m["config_file"] = p.ConfigFile
	}
	if p.KeyFile != "" {
		m["key_file"] = p.KeyFile
	}
	return m
}

// RegisterRbdCluster connects to a Ceph cluster under p.Name (IsExists when
// the name is registered already) and returns the name.
func (c *Client) RegisterRbdCluster(ctx context.Context, p RbdCluster) (string, error) {
	var name string
	err := c.call(ctx, "bdev_rbd_register_cluster", p.params(), &name, p.Key)
	return name, err
}

// UnregisterRbdCluster drops a cluster connection: IsNotFound when there is
// none, IsBusy while bdevs use it.
func (c *Client) UnregisterRbdCluster(ctx context.Context, name string) error {
	return c.call(ctx, "bdev_rbd_unregister_cluster", map[string]string{"name": name}, nil)
}

// RbdBdev is bdev_rbd_create's parameters.
type RbdBdev struct {
	// Name of the bdev ("" lets the dataplane choose one).
	Name        string `json:"name,omitempty"`
	ClusterName string `json:"cluster_name"`
	PoolName    string `json:"pool_name"`
	RbdName     string `json:"rbd_name"`
	BlockSize   uint32 `json:"block_size"`
}

// CreateRbdBdev opens an RBD image as a bdev and returns the bdev's name
// (IsNotFound for an unknown cluster, IsExists for a taken name).
func (c *Client) CreateRbdBdev(ctx context.Context, p RbdBdev) (string, error) {
	var name string
	err := c.call(ctx, "bdev_rbd_create", p, &name)
	return name, err
}

// ResizeRbdBdev grows an RBD bdev's image to newSizeMiB MiB (an image
// already that large is only read again), and with it every cached bdev on
// it and every namespace exporting them; connected hosts are told. Shrinking
// is refused (IsInvalid).
func (c *Client) ResizeRbdBdev(ctx context.Context, name string, newSizeMiB uint64) error {
	return c.call(ctx, "bdev_rbd_resize", map[string]any{"name": name, "new_size": newSizeMiB}, nil)
}

// DeleteRbdBdev closes an RBD bdev (IsNotFound when there is none, IsBusy
// while a cached bdev or a namespace uses it).
func (c *Client) DeleteRbdBdev(ctx context.Context, name string) error {
	return c.call(ctx, "bdev_rbd_delete", map[string]string{"name": name}, nil)
}
