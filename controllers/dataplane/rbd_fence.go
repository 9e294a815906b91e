package dataplane

import (
	"context"
	"fmt"
	"time"
)

// Fencing another server's Ceph client (docs/dataplane.md, "Fencing
// another server's Ceph client"): each server's connection to a cluster
// has a client address; a server that takes a volume over blocklists the
// old owner's through its own connection first.

// RbdClusterInfo is a registered cluster as bdev_rbd_get_clusters_info
// reports it, the cephx key left out.
type RbdClusterInfo struct {
	Name        string            `json:"cluster_name"`
	UserID      string            `json:"user_id,omitempty"`
	ConfigParam map[string]string `json:"config_param,omitempty"`
	ConfigFile  string            `json:"config_file,omitempty"`
	KeyFile     string            `json:"key_file,omitempty"`
	// ClientAddress is the server's Ceph client on that cluster as Ceph
	// knows it (IP:PORT/NONCE, maybe with a v1:/v2: prefix), as `ceph osd
	// blocklist` takes it: what another server blocklists to fence this
	// one (BlocklistCephClient). Empty when the dataplane could not tell.
	ClientAddress string `json:"client_address"`
}

// RbdClusterInfo reads the registration of cluster name (IsNotFound when
// there is none).
func (c *Client) RbdClusterInfo(ctx context.Context, name string) (RbdClusterInfo, error) {
	var out RbdClusterInfo
	err := c.call(ctx, "bdev_rbd_get_clusters_info", map[string]string{"name": name}, &out)
	return out, err
}

// BlocklistCephClient fences another server's Ceph client: through this
// server's registration of cluster, the client at address (from that
// server's RbdClusterInfo) is blocklisted for expire, rounded up to whole
// seconds (0: the dataplane's default, an hour), so that once it returns
// no OSD serving this server afterwards applies anything that client
// sends. Blocklisting an address already blocklisted succeeds (Ceph
// renews the expiry). IsInvalid for an address naming no single client
// instance, for one of this server's own connections and for an expiry
// past a year; IsNotFound for an unknown cluster.
func (c *Client) BlocklistCephClient(ctx context.Context, cluster, address string, expire time.Duration) error {
	if expire < 0 {
		return fmt.Errorf("dataplane bdev_rbd_blocklist_add: negative expiry %v", expire)
	}
	p := map[string]any{"cluster_name": cluster, "client_address": address}
	if expire > 0 {
		p["expire_seconds"] = uint64((expire + time.Second - 1) / time.Second)
	}
	return c.call(ctx, "bdev_rbd_blocklist_add", p, nil)
}
