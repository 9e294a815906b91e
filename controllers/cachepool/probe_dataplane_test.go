package cachepool

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/test/framework"
)

// TestRenderedConfigStartsARealDataplane starts rackcache-dataplane with
// the ConfigMap's configuration (devices being sparse files) and reads it
// the way a pass does: the layout and parameters are the dataplane's, the
// cache bdevs appear, and capacity, allocation, volumes and IOPS follow
// what is created on it.
func TestRenderedConfigStartsARealDataplane(t *testing.T) {
	dir := t.TempDir()
	const deviceBytes = 256 << 20
	pool := testPool("real")
	limit := resource.MustParse("128Mi")
	pool.Spec.Devices = []rcv1.CacheDevice{
		{Path: filepath.Join(dir, "nvme0")},
		{Path: filepath.Join(dir, "nvme1"), Size: &limit},
	}
	for _, d := range pool.Spec.Devices {
		if err := os.WriteFile(d.Path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(d.Path, deviceBytes); err != nil {
			t.Fatal(err)
		}
	}
	config, err := renderDataplaneConfig(pool)
	if err != nil {
		t.Fatal(err)
	}
	configPath := filepath.Join(dir, ConfigKey)
	if err := os.WriteFile(configPath, config, 0o600); err != nil {
		t.Fatal(err)
	}
	// The DaemonSet's hostPath (DirectoryOrCreate) makes this directory.
	if err := os.Mkdir(filepath.Join(dir, "persist"), 0o700); err != nil {
		t.Fatal(err)
	}
	dp := framework.StartDataplane(t, "--config", configPath, "--config-persist", filepath.Join(dir, "persist", "config.json"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	bdevs, err := dp.Client.Bdevs(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cache0", "cache1"} {
		i := slices.IndexFunc(bdevs, func(b dataplane.Bdev) bool { return b.Name == name })
		if i < 0 {
			t.Fatalf("bdev %s not created from the configuration; bdevs: %+v", name, bdevs)
		}
		if bdevs[i].BlockSize != cacheBlockSize || bdevs[i].SizeBytes() != deviceBytes {
			t.Errorf("bdev %s: block size %d, %d bytes; want %d, %d", name, bdevs[i].BlockSize, bdevs[i].SizeBytes(), cacheBlockSize, deviceBytes)
		}
	}

	r := &Reconciler{}
	first := serverReading{}
	if err := r.readInto(ctx, dp.Client, pool, &first); err != nil {
		t.Fatalf("read the server: %v", err)
	}
	// cache0 whole (256 MiB) + cache1 capped at 128 MiB.
	if want := int64(deviceBytes + 128<<20); first.CapacityBytes != want || first.Version == "" || first.Volumes != 0 || len(first.MissingCacheBdevs) != 0 {
		t.Errorf("empty server read as %+v, want capacity %d, a version, no volume", first, want)
	}

	if _, err := dp.Client.CreateMallocBdev(ctx, "core0", 16384, 4096); err != nil {
		t.Fatal(err)
	}
	if _, err := dp.Client.CreateCachedBdev(ctx, dataplane.CachedBdevParams{Name: "vol0", CoreBdevName: "core0", CacheBdevName: "cache0", CacheSizeMiB: 32}); err != nil {
		t.Fatal(err)
	}
	second := serverReading{}
	if err := r.readInto(ctx, dp.Client, pool, &second); err != nil {
		t.Fatalf("read the server: %v", err)
	}
	devices, err := dp.Client.CacheDevices(ctx)
	if err != nil || len(devices) != 1 {
		t.Fatalf("cache devices %+v, %v; want cache0 only", devices, err)
	}
	wantCapacity := int64(devices[0].TotalMiB)*mib + 128<<20
	if second.CapacityBytes != wantCapacity || second.AllocatedBytes != 32*mib || second.Volumes != 1 || len(second.DegradedVolumes) != 0 {
		t.Errorf("server with one volume read as %+v, want capacity %d (formatted cache0 + cache1), allocated 32 MiB, 1 volume", second, wantCapacity)
	}
}
