package dataplane

import (
	"context"
	"encoding/json"
)

// Generic bdev methods: listing, I/O statistics, and the RAM-backed malloc
// bdevs tests and demos use as core or cache bdevs.

// Bdev is one entry of bdev_get_bdevs.
type Bdev struct {
	Name        string `json:"name"`
	ProductName string `json:"product_name"`
	BlockSize   uint32 `json:"block_size"`
	NumBlocks   uint64 `json:"num_blocks"`
	UUID        string `json:"uuid"`
	// Claimed: another bdev or an NVMe-oF namespace uses it.
	Claimed          bool            `json:"claimed"`
	ClaimType        string          `json:"claim_type,omitempty"`
	SupportedIOTypes map[string]bool `json:"supported_io_types"`
	DriverSpecific   json.RawMessage `json:"driver_specific"`
}

// SizeBytes is the bdev's capacity.
func (b *Bdev) SizeBytes() uint64 { return b.NumBlocks * uint64(b.BlockSize) }

// Bdevs lists every bdev (name "") or the one named (IsNotFound when
// there is none).
func (c *Client) Bdevs(ctx context.Context, name string) ([]Bdev, error) {
	var p any
	if name != "" {
		p = map[string]string{"name": name}
	}
	var out []Bdev
	err := c.call(ctx, "bdev_get_bdevs", p, &out)
	return out, err
}

// BdevIOStat is one bdev's counters since it was created. Latencies are
// sums in ticks (IOStats.TickRate per second; nanoseconds here).
type BdevIOStat struct {
	Name              string `json:"name"`
	BytesRead         uint64 `json:"bytes_read"`
	NumReadOps        uint64 `json:"num_read_ops"`
	BytesWritten      uint64 `json:"bytes_written"`
	NumWriteOps       uint64 `json:"num_write_ops"`
	BytesUnmapped     uint64 `json:"bytes_unmapped"`
	NumUnmapOps       uint64 `json:"num_unmap_ops"`
	NumFlushOps       uint64 `json:"num_flush_ops"`
	NumFUAWriteOps    uint64 `json:"num_fua_write_ops"`
	ReadLatencyTicks  uint64 `json:"read_latency_ticks"`
	WriteLatencyTicks uint64 `json:"write_latency_ticks"`
	UnmapLatencyTicks uint64 `json:"unmap_latency_ticks"`
	IOError           uint64 `json:"io_error"`
}

// IOStats is bdev_get_iostat's answer.
type IOStats struct {
	TickRate uint64       `json:"tick_rate"`
	Ticks    uint64       `json:"ticks"`
	Bdevs    []BdevIOStat `json:"bdevs"`
}

// IOStat returns the counters of the bdevs named (all when none is).
func (c *Client) IOStat(ctx context.Context, names ...string) (*IOStats, error) {
	var p any
	if len(names) > 0 {
		p = map[string][]string{"names": names}
	}
	var s IOStats
	if err := c.call(ctx, "bdev_get_iostat", p, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// CreateMallocBdev creates a RAM-backed bdev of numBlocks blocks of
// blockSize bytes and returns its name.
func (c *Client) CreateMallocBdev(ctx context.Context, name string, numBlocks uint64, blockSize uint32) (string, error) {
	var out string
	err := c.call(ctx, "bdev_malloc_create", map[string]any{"name": name, "num_blocks": numBlocks, "block_size": blockSize}, &out)
	return out, err
}

// DeleteMallocBdev deletes a malloc bdev (IsBusy while something claims it).
func (c *Client) DeleteMallocBdev(ctx context.Context, name string) error {
	return c.call(ctx, "bdev_malloc_delete", map[string]string{"name": name}, nil)
}

// CreateAioBdev opens a file or block device as a bdev (O_DIRECT) of
// blockSize-byte blocks and returns its name (IsExists for a taken name).
func (c *Client) CreateAioBdev(ctx context.Context, name, filename string, blockSize uint32) (string, error) {
	var out string
	err := c.call(ctx, "bdev_aio_create", map[string]any{"name": name, "filename": filename, "block_size": blockSize}, &out)
	return out, err
}
