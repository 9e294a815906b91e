package cachepool

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/test/framework"
)

// TestAddedDeviceReachesARunningServer: a dataplane that started with the
// pool's first device (and persisted that) gets a device added to the pool
// from the next pass, over JSON-RPC; a device that cannot be opened is
// reported missing with the dataplane's reason, and the others still count.
func TestAddedDeviceReachesARunningServer(t *testing.T) {
	dir := t.TempDir()
	const deviceBytes = 64 << 20
	pool := testPool("grow")
	pool.Spec.Devices = []rcv1.CacheDevice{{Path: filepath.Join(dir, "nvme0")}}
	for _, name := range []string{"nvme0", "nvme1"} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, deviceBytes); err != nil {
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
	dp := framework.StartDataplane(t, "--config", configPath, "--config-persist", filepath.Join(dir, "persisted.json"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := &Reconciler{}

	pool.Spec.Devices = append(pool.Spec.Devices,
		rcv1.CacheDevice{Path: filepath.Join(dir, "nvme1")},
		rcv1.CacheDevice{Path: filepath.Join(dir, "absent")})
	var got serverReading
	if err := r.readInto(ctx, dp.Client, pool, &got); err != nil {
		t.Fatalf("read the server: %v", err)
	}
	if got.CapacityBytes != 2*deviceBytes {
		t.Errorf("capacity %d after adding nvme1, want %d (cache0 + cache1)", got.CapacityBytes, 2*deviceBytes)
	}
	if !slices.Equal(got.MissingCacheBdevs, []string{"cache2"}) || len(got.DeviceErrors) != 1 || !strings.Contains(got.DeviceErrors[0], "absent") {
		t.Errorf("missing %v, errors %v; want cache2 missing with its path in the reason", got.MissingCacheBdevs, got.DeviceErrors)
	}
	bdevs, err := dp.Client.Bdevs(ctx, "cache1")
	if err != nil || len(bdevs) != 1 {
		t.Fatalf("bdev cache1 on the dataplane: %+v, %v", bdevs, err)
	}
	// A second pass opens nothing new and reads the same.
	var again serverReading
	if err := r.readInto(ctx, dp.Client, pool, &again); err != nil || again.CapacityBytes != got.CapacityBytes {
		t.Errorf("second pass: %+v, %v", again, err)
	}
	// The dataplane persisted the added device: a restart has it.
	persisted, err := os.ReadFile(filepath.Join(dir, "persisted.json"))
	if err != nil || !strings.Contains(string(persisted), filepath.Join(dir, "nvme1")) {
		t.Errorf("persisted configuration lacks nvme1 (%v)", err)
	}
}
