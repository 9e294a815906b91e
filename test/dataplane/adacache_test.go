package dataplane_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/test/framework"
)

// The operator's typed cached-volume calls against the real dataplane: a
// write-back cached bdev on a malloc core and a malloc cache bdev, listed,
// inspected, flushed, tuned and deleted; refusals carry the dataplane's
// codes.
func TestGoClientCachedBdevs(t *testing.T) {
	t.Parallel() // shares nothing with the other tests: see the package comment
	dp := framework.StartDataplane(t)
	c := dp.Client
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dp.Call(t, "bdev_malloc_create", map[string]any{"name": "Core0", "num_blocks": 16384, "block_size": 512}, nil)
	dp.Call(t, "bdev_malloc_create", map[string]any{"name": "Cache0", "num_blocks": 131072, "block_size": 512}, nil)

	p := dataplane.CachedBdevParams{
		Name: "C0", CoreBdevName: "Core0", CacheBdevName: "Cache0", CacheSizeMiB: 8,
		WriteMode: dataplane.WriteBack, Mode: "fixed", BlockSizesKiB: []uint32{32},
		Cleaning:  &dataplane.Cleaning{Policy: "lazy", WakeUpMs: 500},
		SeqCutoff: &dataplane.SeqCutoff{Policy: "never"},
	}
	// load over a device holding no cache: refused, nothing formatted.
	load := p
	load.Load = true
	if _, err := c.CreateCachedBdev(ctx, load); !dataplane.IsCode(err, -19) {
		t.Fatalf("create with load on an unformatted cache bdev: err = %v, want code -19", err)
	}
	name, err := c.CreateCachedBdev(ctx, p)
	if err != nil || name != "C0" {
		t.Fatalf("CreateCachedBdev: %q, %v", name, err)
	}
	if _, err := c.CreateCachedBdev(ctx, p); !dataplane.IsCode(err, -17) {
		t.Errorf("a second C0: err = %v, want code -17 (exists)", err)
	}

	list, err := c.CachedBdevs(ctx, "")
	if err != nil || len(list) != 1 {
		t.Fatalf("CachedBdevs: %+v, %v", list, err)
	}
	got := list[0]
	if got.CoreBdevName != "Core0" || got.CacheBdevName != "Cache0" || got.WriteMode != "wb" ||
		got.CacheSizeMiB != 8 || !got.Params.Load || got.Params.Cleaning.WakeUpMs != 500 {
		t.Errorf("CachedBdevs: %+v", got)
	}
	if _, err := c.CachedBdevs(ctx, "Core0"); !dataplane.IsCode(err, -19) {
		t.Errorf("CachedBdevs of a bdev that is not cached: err = %v, want code -19", err)
	}

	st, err := c.CachedBdevStats(ctx, "C0")
	if err != nil || st.Name != "C0" || st.Usage.CapacityBytes != 8<<20 || st.WriteMode != "wb" || len(st.Raw) == 0 {
		t.Fatalf("CachedBdevStats: %+v, %v", st, err)
	}
	if err := c.ResetCachedBdevStats(ctx, "C0"); err != nil {
		t.Errorf("ResetCachedBdevStats: %v", err)
	}
	if err := c.FlushCachedBdev(ctx, "C0"); err != nil {
		t.Errorf("FlushCachedBdev: %v", err)
	}
	fs, err := c.CachedBdevFlushStatus(ctx, "C0")
	if err != nil || fs.DirtyBytes != 0 {
		t.Errorf("CachedBdevFlushStatus: %+v, %v", fs, err)
	}

	if err := c.SetCachedBdevMode(ctx, "C0", dataplane.WriteThrough); err != nil {
		t.Errorf("SetCachedBdevMode: %v", err)
	} else {
		list, _ := c.CachedBdevs(ctx, "C0")
		if len(list) != 1 || list[0].WriteMode != "wt" {
			t.Errorf("after SetCachedBdevMode wt: %+v", list)
		}
	}
	if err := c.SetCachedBdevMode(ctx, "C0", "xx"); !dataplane.IsCode(err, dataplane.CodeInvalidParams) {
		t.Errorf("SetCachedBdevMode xx: err = %v, want invalid params", err)
	}
	if err := c.ResizeCachedBdev(ctx, "C0", 4); err != nil {
		t.Errorf("ResizeCachedBdev: %v", err)
	} else {
		list, _ := c.CachedBdevs(ctx, "C0")
		if len(list) != 1 || list[0].CacheSizeMiB != 4 {
			t.Errorf("after ResizeCachedBdev 4: %+v", list)
		}
	}

	// The core is claimed while C0 exists.
	if err := c.Call(ctx, "bdev_malloc_delete", map[string]any{"name": "Core0"}, nil); !dataplane.IsCode(err, -16) ||
		!strings.Contains(err.Error(), "C0") {
		t.Errorf("deleting the core: err = %v, want code -16 naming C0", err)
	}
	if err := c.DeleteCachedBdev(ctx, "C0", false); err != nil {
		t.Fatalf("DeleteCachedBdev: %v", err)
	}
	if list, err := c.CachedBdevs(ctx, ""); err != nil || len(list) != 0 {
		t.Errorf("after delete: %+v, %v", list, err)
	}
	if err := c.DeleteCachedBdev(ctx, "C0", true); !dataplane.IsCode(err, -19) {
		t.Errorf("deleting it again: err = %v, want code -19", err)
	}
	dp.Call(t, "bdev_malloc_delete", map[string]any{"name": "Core0"}, nil)
}
