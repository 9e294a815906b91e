package cachedvolume

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/controllers/servers"
	"github.com/rackcache/rackcache/test/framework"
)

// TestTeardownOfACacheThatIsNotLoaded: a real dataplane restarted without
// its configuration has a volume's cache on its device that no cached bdev
// serves (as after the dataplane refused it as damaged). Teardown refuses
// to drop it while it may hold dirty data, discards it when allowed, and
// leaves the device's other volume alone.
func TestTeardownOfACacheThatIsNotLoaded(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cache.img")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(file, 64<<20); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func() *framework.Dataplane {
		dp := framework.StartDataplane(t)
		dp.Call(t, "bdev_aio_create", map[string]any{"name": servers.CacheBdevName(0), "filename": file, "block_size": 4096}, nil)
		for _, core := range []string{"core-x", "core-y"} {
			dp.Call(t, "bdev_malloc_create", map[string]any{"name": core, "num_blocks": 8192, "block_size": 4096}, nil)
		}
		return dp
	}
	cached := func(vol string, load bool) dataplane.CachedBdevParams {
		return dataplane.CachedBdevParams{Name: CachedBdevName(vol), CoreBdevName: "core-" + vol,
			CacheBdevName: servers.CacheBdevName(0), CacheSizeMiB: 4, WriteMode: dataplane.WriteBack, Load: load}
	}
	dp := start()
	for _, vol := range []string{"x", "y"} {
		if _, err := dp.Client.CreateCachedBdev(ctx, cached(vol, false)); err != nil {
			t.Fatalf("create %s: %v", vol, err)
		}
	}
	dp.Stop(t)

	dp = start()
	if _, err := dp.Client.CreateCachedBdev(ctx, cached("y", true)); err != nil {
		t.Fatalf("load y: %v", err)
	}
	holds := func(vol string) bool {
		devices, err := dp.Client.CacheDevices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return deviceHolding(devices, CachedBdevName(vol)) != ""
	}
	if !holds("x") {
		t.Fatal("the device does not list x's cache")
	}
	keep := false
	if _, err := Teardown(ctx, dp.Client, "x", "", &keep); err == nil || !strings.Contains(err.Error(), DiscardDirtyDataAnnotation) {
		t.Errorf("teardown that may not discard: %v; want a refusal naming %s", err, DiscardDirtyDataAnnotation)
	}
	if !holds("x") {
		t.Error("the refusal removed x's cache")
	}
	discard := true
	if tr, err := Teardown(ctx, dp.Client, "x", "", &discard); err != nil || !tr.Done {
		t.Fatalf("teardown that discards: %+v, %v", tr, err)
	}
	if holds("x") || !holds("y") {
		t.Errorf("after the discard: x listed %v (want false), y listed %v (want true)", holds("x"), holds("y"))
	}
}
