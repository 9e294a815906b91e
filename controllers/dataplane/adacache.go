package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
)

// Cached volumes (bdev_adacache_*): a bdev putting a share of a cache bdev
// in front of a core bdev. See docs/dataplane.md, "Cached volumes".

// Cache modes (write_mode).
const (
	WriteThrough = "wt"
	WriteBack    = "wb"
	WriteAround  = "wa"
	PassThrough  = "pt"
)

// Cleaning is a cleaning policy with its parameters; zero parameters take
// the dataplane's defaults.
type Cleaning struct {
	// Policy is nop, lazy or aggressive.
	Policy string `json:"policy"`
	// lazy
	StalenessMs         uint64 `json:"staleness_ms,omitempty"`
	MaxBatch            uint32 `json:"max_batch,omitempty"`
	ActivityThresholdMs uint64 `json:"activity_threshold_ms,omitempty"`
	// lazy and aggressive
	WakeUpMs uint64 `json:"wake_up_ms,omitempty"`
	// aggressive
	DirtyRatio  float64 `json:"dirty_ratio,omitempty"`
	BatchBlocks uint32  `json:"batch_blocks,omitempty"`
}

// SeqCutoff is the sequential cutoff: policy always, full or never.
type SeqCutoff struct {
	Policy       string `json:"policy"`
	ThresholdKiB uint64 `json:"threshold_kib,omitempty"`
}

// CachedBdevParams are bdev_adacache_create's parameters (and what
// bdev_adacache_get_bdevs reports as params). Empty fields take the
// dataplane's defaults.
type CachedBdevParams struct {
	Name          string     `json:"name"`
	CoreBdevName  string     `json:"core_bdev_name"`
	CacheBdevName string     `json:"cache_bdev_name"`
	CacheSizeMiB  uint64     `json:"cache_size_mib"`
	WriteMode     string     `json:"write_mode,omitempty"`
	Mode          string     `json:"mode,omitempty"`
	BlockSizesKiB []uint32   `json:"block_sizes_kib,omitempty"`
	WriteMissFill string     `json:"write_miss_fill,omitempty"`
	FillSize      string     `json:"fill_size,omitempty"`
	Admission     string     `json:"admission,omitempty"`
	Eviction      string     `json:"eviction,omitempty"`
	Cleaning      *Cleaning  `json:"cleaning,omitempty"`
	SeqCutoff     *SeqCutoff `json:"seq_cutoff,omitempty"`
	// Load attaches to the volume's existing cache on the cache bdev
	// instead of creating it (never formats).
	Load bool `json:"load,omitempty"`
	// ForceFormat formats a cache bdev that is not blank (erasing it);
	// never reported back, never saved by the dataplane.
	ForceFormat bool `json:"force_format,omitempty"`
	// Role is owner (empty) or mirror (mirror.go).
	Role string `json:"role,omitempty"`
	// Epoch is the control plane's epoch of the volume, when it keeps one.
	Epoch *uint64 `json:"epoch,omitempty"`
}

// CachedBdev is one entry of bdev_adacache_get_bdevs.
type CachedBdev struct {
	Name          string           `json:"name"`
	CoreBdevName  string           `json:"core_bdev_name"`
	CacheBdevName string           `json:"cache_bdev_name"`
	WriteMode     string           `json:"write_mode"`
	Mode          string           `json:"mode"`
	CacheSizeMiB  uint64           `json:"cache_size_mib"`
	Degraded      bool             `json:"degraded"`
	Params        CachedBdevParams `json:"params"`
}

// CacheStats is bdev_adacache_get_stats' answer: the commonly used
// figures typed, every figure in Raw.
type CacheStats struct {
	Name       string `json:"name"`
	WriteMode  string `json:"write_mode"`
	Degraded   bool   `json:"degraded"`
	DirtyBytes uint64 `json:"dirty_bytes"`
	// DamagedBytes are dirty bytes that failed their checksum on the cache
	// device: hosts get a media error on them, they are never flushed.
	DamagedBytes uint64 `json:"damaged_bytes"`
	Usage        struct {
		CapacityBytes  uint64 `json:"capacity_bytes"`
		OccupancyBytes uint64 `json:"occupancy_bytes"`
		DirtyBytes     uint64 `json:"dirty_bytes"`
	} `json:"usage"`
	Requests struct {
		ReadHits    uint64 `json:"rd_hits"`
		ReadMisses  uint64 `json:"rd_misses"`
		ReadTotal   uint64 `json:"rd_total"`
		WriteHits   uint64 `json:"wr_hits"`
		WriteMisses uint64 `json:"wr_misses"`
		WriteTotal  uint64 `json:"wr_total"`
	} `json:"requests"`
	Blocks struct {
		CoreRead   uint64 `json:"core_volume_rd"`
		CoreWrite  uint64 `json:"core_volume_wr"`
		CacheRead  uint64 `json:"cache_volume_rd"`
		CacheWrite uint64 `json:"cache_volume_wr"`
		HostRead   uint64 `json:"volume_rd"`
		HostWrite  uint64 `json:"volume_wr"`
	} `json:"blocks"`
	HitRatio struct {
		Read      float64 `json:"read"`
		ReadBytes float64 `json:"read_bytes"`
		Write     float64 `json:"write"`
	} `json:"hit_ratio"`
	FlushedBytes uint64 `json:"flushed_bytes"`
	// Role, Epoch and Held: see mirror.go; Held volumes write nothing back
	// until their role is confirmed.
	Role  string  `json:"role"`
	Epoch *uint64 `json:"epoch,omitempty"`
	Held  bool    `json:"held"`
	// Replica is an owner's mirror, MarkedCleanBytes a mirror's bytes its
	// owner's marks cleaned.
	Replica          *ReplicaStats `json:"replica,omitempty"`
	MarkedCleanBytes uint64        `json:"marked_clean_bytes"`
	// Raw is the whole answer.
	Raw json.RawMessage `json:"-"`
}

// FlushStatus is bdev_adacache_flush_status' answer.
type FlushStatus struct {
	InProgress   bool    `json:"in_progress"`
	DirtyBytes   uint64  `json:"dirty_bytes"`
	FlushedBytes uint64  `json:"flushed_bytes"`
	ElapsedMs    uint64  `json:"elapsed_ms"`
	Error        *string `json:"error"`
}

// CreateCachedBdev creates a cached bdev and returns its name.
func (c *Client) CreateCachedBdev(ctx context.Context, p CachedBdevParams) (string, error) {
	var name string
	err := c.call(ctx, "bdev_adacache_create", p, &name)
	return name, err
}

// DeleteCachedBdev deletes a cached bdev, writing its dirty data back
// first; force discards it instead.
func (c *Client) DeleteCachedBdev(ctx context.Context, name string, force bool) error {
	p := map[string]any{"name": name}
	if force {
		p["force"] = true
	}
	return c.call(ctx, "bdev_adacache_delete", p, nil)
}

// CachedBdevs lists the cached bdevs (name "" for all).
func (c *Client) CachedBdevs(ctx context.Context, name string) ([]CachedBdev, error) {
	var p any
	if name != "" {
		p = map[string]any{"name": name}
	}
	var out []CachedBdev
	err := c.call(ctx, "bdev_adacache_get_bdevs", p, &out)
	return out, err
}

// CachedBdevStats returns a cached bdev's statistics since the last reset.
func (c *Client) CachedBdevStats(ctx context.Context, name string) (*CacheStats, error) {
	var raw json.RawMessage
	if err := c.call(ctx, "bdev_adacache_get_stats", map[string]any{"name": name}, &raw); err != nil {
		return nil, err
	}
	s := &CacheStats{Raw: raw}
	if err := json.Unmarshal(raw, s); err != nil {
		return nil, fmt.Errorf("dataplane bdev_adacache_get_stats: decode result: %w", err)
	}
	return s, nil
}

// ResetCachedBdevStats restarts a cached bdev's statistics from zero.
func (c *Client) ResetCachedBdevStats(ctx context.Context, name string) error {
	return c.call(ctx, "bdev_adacache_reset_stats", map[string]any{"name": name}, nil)
}

// FlushCachedBdev starts writing every dirty block back (see FlushStatus).
func (c *Client) FlushCachedBdev(ctx context.Context, name string) error {
	return c.call(ctx, "bdev_adacache_flush", map[string]any{"name": name}, nil)
}

// CachedBdevFlushStatus reports the progress of a flush.
func (c *Client) CachedBdevFlushStatus(ctx context.Context, name string) (*FlushStatus, error) {
	var s FlushStatus
	if err := c.call(ctx, "bdev_adacache_flush_status", map[string]any{"name": name}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// SetCachedBdevMode changes the cache mode (leaving write-back flushes
// first).
func (c *Client) SetCachedBdevMode(ctx context.Context, name, writeMode string) error {
	return c.call(ctx, "bdev_adacache_set_mode", map[string]any{"name": name, "write_mode": writeMode}, nil)
}

// StartCachedBdevMode starts switching a cached bdev's cache mode and
// returns at once (bdev_adacache_set_mode with wait false): leaving
// write-back for write-through or write-around, writes go to core from now
// on and the new mode shows once the flush (CachedBdevFlushStatus) ends.
func (c *Client) StartCachedBdevMode(ctx context.Context, name, writeMode string) error {
	return c.call(ctx, "bdev_adacache_set_mode", map[string]any{"name": name, "write_mode": writeMode, "wait": false}, nil)
}

// ResizeCachedBdev changes a cached bdev's share of its cache bdev.
func (c *Client) ResizeCachedBdev(ctx context.Context, name string, cacheSizeMiB uint64) error {
	return c.call(ctx, "bdev_adacache_resize", map[string]any{"name": name, "cache_size_mib": cacheSizeMiB}, nil)
}

// PolicyChange is bdev_adacache_set_policy's changes: nil or empty fields
// stay as they are (at least one must be set).
type PolicyChange struct {
	Admission string     `json:"admission,omitempty"`
	Eviction  string     `json:"eviction,omitempty"`
	Cleaning  *Cleaning  `json:"cleaning,omitempty"`
	SeqCutoff *SeqCutoff `json:"seq_cutoff,omitempty"`
}

// SetCachedBdevPolicy changes a cached bdev's policies in place.
func (c *Client) SetCachedBdevPolicy(ctx context.Context, name string, p PolicyChange) error {
	params := struct {
		Name string `json:"name"`
		PolicyChange
	}{name, p}
	return c.call(ctx, "bdev_adacache_set_policy", params, nil)
}

// CacheVolume is a volume's share of a cache device.
type CacheVolume struct {
	Name         string `json:"name"`
	CacheSizeMiB uint64 `json:"cache_size_mib"`
	// Attached: a cached bdev of this dataplane serves it (false: on the
	// device but not loaded).
	Attached bool `json:"attached"`
}

// CacheDevice is one entry of bdev_adacache_get_devices: a formatted cache
// bdev, its room and the volumes it holds.
type CacheDevice struct {
	CacheBdevName string        `json:"cache_bdev_name"`
	UUID          string        `json:"uuid"`
	TotalMiB      uint64        `json:"total_mib"`
	FreeMiB       uint64        `json:"free_mib"`
	Volumes       []CacheVolume `json:"volumes"`
}

// CacheDevices lists the cache devices (the capacity the operator places
// volumes by).
func (c *Client) CacheDevices(ctx context.Context) ([]CacheDevice, error) {
	var out []CacheDevice
	err := c.call(ctx, "bdev_adacache_get_devices", nil, &out)
	return out, err
}
