package dataplane_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rackcache/rackcache/test/framework"
)

// adacacheStats is the part of bdev_adacache_get_stats the tests read.
type adacacheStats struct {
	Name      string `json:"name"`
	WriteMode string `json:"write_mode"`
	Requests  struct {
		RdHits   uint64 `json:"rd_hits"`
		RdMisses uint64 `json:"rd_misses"`
		RdTotal  uint64 `json:"rd_total"`
		WrTotal  uint64 `json:"wr_total"`
	} `json:"requests"`
	Blocks struct {
		CoreVolumeRd  uint64 `json:"core_volume_rd"`
		CoreVolumeWr  uint64 `json:"core_volume_wr"`
		CacheVolumeRd uint64 `json:"cache_volume_rd"`
		CacheVolumeWr uint64 `json:"cache_volume_wr"`
		VolumeRd      uint64 `json:"volume_rd"`
		VolumeWr      uint64 `json:"volume_wr"`
	} `json:"blocks"`
	Errors struct {
		Total uint64 `json:"total"`
	} `json:"errors"`
	HitRatio struct {
		Read      float64 `json:"read"`
		ReadBytes float64 `json:"read_bytes"`
		Write     float64 `json:"write"`
	} `json:"hit_ratio"`
	Usage struct {
		CapacityBytes uint64 `json:"capacity_bytes"`
	} `json:"usage"`
	DirtyBytes uint64 `json:"dirty_bytes"`
	Evictions  struct {
		Blocks uint64 `json:"blocks"`
		Bytes  uint64 `json:"bytes"`
	} `json:"evictions"`
}

func (s adacacheStats) String() string {
	return fmt.Sprintf("reads %d (hits %d, misses %d, hit ratio %.3f), writes %d, dirty %d B, evicted %d blocks; "+
		"core rd %d wr %d, cache rd %d wr %d, host rd %d wr %d B; errors %d",
		s.Requests.RdTotal, s.Requests.RdHits, s.Requests.RdMisses, s.HitRatio.Read, s.Requests.WrTotal,
		s.DirtyBytes, s.Evictions.Blocks, s.Blocks.CoreVolumeRd, s.Blocks.CoreVolumeWr,
		s.Blocks.CacheVolumeRd, s.Blocks.CacheVolumeWr, s.Blocks.VolumeRd, s.Blocks.VolumeWr, s.Errors.Total)
}

// cacheStats is bdev_adacache_get_stats of one cached bdev.
func cacheStats(t *testing.T, dp *framework.Dataplane, name string) adacacheStats {
	t.Helper()
	var s adacacheStats
	dp.Call(t, "bdev_adacache_get_stats", map[string]any{"name": name}, &s)
	return s
}

// callErr is Dataplane.Call returning the error instead of failing.
func callErr(dp *framework.Dataplane, method string, params, result any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return dp.Client.Call(ctx, method, params, result)
}

// flushCache starts bdev_adacache_flush and waits (bounded) until
// bdev_adacache_flush_status says it is done with no dirty bytes left.
func flushCache(t *testing.T, dp *framework.Dataplane, name string) {
	t.Helper()
	dp.Call(t, "bdev_adacache_flush", map[string]any{"name": name}, nil)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var st struct {
			InProgress bool   `json:"in_progress"`
			DirtyBytes uint64 `json:"dirty_bytes"`
		}
		dp.Call(t, "bdev_adacache_flush_status", map[string]any{"name": name}, &st)
		if !st.InProgress && st.DirtyBytes == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: flush not done within 3 minutes (in_progress %v, %d dirty bytes)", name, st.InProgress, st.DirtyBytes)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// newRbdImage creates an empty image of size MiB in the test pool.
func newRbdImage(t *testing.T, ceph *framework.Ceph, image string, mib int) {
	t.Helper()
	if out, err := ceph.Admin(t.Context(), "rbd", "create", "--size", fmt.Sprintf("%dM", mib), ceph.Pool+"/"+image); err != nil {
		t.Fatalf("create rbd image %s: %v\n%s", image, err, out)
	}
}

// registerCeph registers ceph as cluster "ceph0" (the restricted user).
func registerCeph(t *testing.T, dp *framework.Dataplane, ceph *framework.Ceph) {
	t.Helper()
	dp.Call(t, "bdev_rbd_register_cluster", map[string]any{
		"name":         "ceph0",
		"user_id":      ceph.User,
		"config_param": map[string]string{"mon_host": ceph.MonHost, "key": ceph.Key},
	}, nil)
}

// openRbd opens image of cluster ceph0 as bdev name with blockSize sectors.
func openRbd(t *testing.T, dp *framework.Dataplane, ceph *framework.Ceph, name, image string, blockSize int) {
	t.Helper()
	dp.Call(t, "bdev_rbd_create", map[string]any{
		"name": name, "cluster_name": "ceph0", "pool_name": ceph.Pool, "rbd_name": image, "block_size": blockSize,
	}, nil)
}

// rbdExport is Ceph's own copy of image (`rbd export`, read from the OSDs
// by Ceph's tools, not through the dataplane).
func rbdExport(t *testing.T, ceph *framework.Ceph, image string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), image+".export")
	if b, err := ceph.Admin(t.Context(), "rbd", "export", "--no-progress", ceph.Pool+"/"+image, out); err != nil {
		t.Fatalf("rbd export %s: %v\n%s", image, err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(out)
	return data
}

// randomFile writes n random bytes (never a zero byte, so zeroes read back
// are never mistaken for data) to a file in dir and returns them.
func randomFile(t *testing.T, dir, name string, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	fillRandom(t, b)
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// fillRandom fills b with random bytes, none of them zero.
func fillRandom(t *testing.T, b []byte) {
	t.Helper()
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] |= 1
	}
}

// sparseFile creates an empty (sparse) file of size bytes at path: a cache
// device or aio bdev's backing file.
func sparseFile(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

// exportWriteBackOverFile serves a write-back cached bdev name over RBD
// image (bdev Core0, 4 KiB blocks) with aio bdev CacheFile on cacheFile as
// its cache device (16 MiB of it), as subsystem nqn to the guest on port;
// extra parameters are added to bdev_adacache_create's.
func exportWriteBackOverFile(t *testing.T, dp *framework.Dataplane, ceph *framework.Ceph, image, cacheFile, name, nqn string, port int, extra map[string]any) {
	t.Helper()
	registerCeph(t, dp, ceph)
	openRbd(t, dp, ceph, "Core0", image, 4096)
	dp.Call(t, "bdev_aio_create", map[string]any{"name": "CacheFile", "filename": cacheFile, "block_size": 4096}, nil)
	params := map[string]any{
		"name": name, "core_bdev_name": "Core0", "cache_bdev_name": "CacheFile", "cache_size_mib": 16,
		"write_mode": "wb", "seq_cutoff": map[string]any{"policy": "never"},
	}
	for k, v := range extra {
		params[k] = v
	}
	dp.Call(t, "bdev_adacache_create", params, nil)
	dp.Call(t, "nvmf_create_transport", map[string]any{"trtype": "TCP"}, nil)
	exportToGuest(t, dp, nqn, name, "rackcache "+strings.ToLower(name), port, framework.GuestHostNQN(t))
}

// spreadWriteFunction is a guest shell function: `write_spread` writes
// block i (4 KiB) of /job/data at MiB i of $dev for i < $NB, each in a
// cache block of its own, and prints write=0 when every write succeeded.
const spreadWriteFunction = `
write_spread() {
	i=0; rc=0
	while [ $i -lt $NB ]; do
		dd if=/job/data of="$dev" bs=4096 skip=$i seek=$((i * 256)) count=1 oflag=direct conv=notrunc 2>/dev/null || rc=1
		i=$((i + 1))
	done
	echo "write=$rc"
}
`
