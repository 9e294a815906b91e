package dataplane

import "context"

// Mirrored write-back (bdev_adacache_set_role, bdev_adacache_set_mirror):
// an owner forwards its write-back writes to a mirror's copy of the volume
// and acknowledges them once both servers have them. See docs/dataplane.md,
// "Mirrored write-back".

// Roles of a cached volume.
const (
	RoleOwner  = "owner"
	RoleMirror = "mirror"
)

// Replica states an owner reports for its mirror.
const (
	ReplicaInSync  = "in-sync"
	ReplicaSyncing = "syncing"
	ReplicaBroken  = "broken"
)

// MirrorTarget is where an owner's mirror serves its replication
// subsystem, and how the owner logs in (keyring key names, never secrets).
type MirrorTarget struct {
	TrAddr         string `json:"traddr"`
	TrSvcID        string `json:"trsvcid"`
	SubNQN         string `json:"subnqn"`
	HostNQN        string `json:"hostnqn"`
	NSID           uint32 `json:"nsid,omitempty"`
	DhchapKey      string `json:"dhchap_key,omitempty"`
	DhchapCtrlrKey string `json:"dhchap_ctrlr_key,omitempty"`
}

// ReplicaStats is the replica part of bdev_adacache_get_stats: an owner's
// mirror.
type ReplicaStats struct {
	Target      string `json:"target"`
	State       string `json:"state"`
	Error       string `json:"error,omitempty"`
	Inflight    int    `json:"inflight"`
	Writes      uint64 `json:"writes"`
	WriteBytes  uint64 `json:"write_bytes"`
	Deallocates uint64 `json:"deallocates"`
	Marks       uint64 `json:"marks"`
	MarkBytes   uint64 `json:"mark_bytes"`
}

// SetCachedBdevRole makes a cached bdev owner or mirror; epoch, when not
// nil, is the control plane's (an older one than the volume's is refused,
// and a volume loaded with one writes nothing back until confirmed).
func (c *Client) SetCachedBdevRole(ctx context.Context, name, role string, epoch *uint64) error {
	p := map[string]any{"name": name, "role": role}
	if epoch != nil {
		p["epoch"] = *epoch
	}
	return c.call(ctx, "bdev_adacache_set_role", p, nil)
}

// SetCachedBdevMirror connects a write-back owner to its mirror, or with
// nil drops the mirror (answers held for a lost one are then released).
func (c *Client) SetCachedBdevMirror(ctx context.Context, name string, m *MirrorTarget) error {
	p := map[string]any{"name": name}
	if m != nil {
		p["mirror"] = m
	}
	return c.call(ctx, "bdev_adacache_set_mirror", p, nil)
}
