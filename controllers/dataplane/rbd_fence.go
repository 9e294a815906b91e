package dataplane

import (
	"context"
	"time"
)

// RbdClusterInfo is what a server says of one registered Ceph cluster.
type RbdClusterInfo struct {
	Name string `json:"name"`
	// ClientAddress is the server's Ceph client on that cluster, as
	// `ceph osd blocklist` takes it.
	ClientAddress string `json:"client_address"`
}

// RbdClusterInfo reads the registration of cluster name.
func (c *Client) RbdClusterInfo(ctx context.Context, name string) (RbdClusterInfo, error) {
	var out RbdClusterInfo
	err := c.call(ctx, "bdev_rbd_get_clusters_info", map[string]string{"name": name}, &out)
	if out.Name == "" {
		out.Name = name
	}
	return out, err
}

// BlocklistCephClient fences another server's Ceph client: through this
// server's registration of cluster, the client at address is blocklisted
// for expire, so that no write of it reaches an OSD any more.
func (c *Client) BlocklistCephClient(ctx context.Context, cluster, address string, expire time.Duration) error {
	p := map[string]any{"cluster_name": cluster, "client_address": address, "expire_seconds": int64(expire / time.Second)}
	return c.call(ctx, "bdev_rbd_blocklist_add", p, nil)
}
