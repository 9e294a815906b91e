package dataplane_test

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rackcache/rackcache/test/framework"
)

// The lifecycle job: one guest boot, the host acting between its phases
// (`step NAME`). Each volume has its own subsystem.
const lifecycleJob = `set -u
A=%[1]s; S=%[2]d; PFX=%[3]s
attach() {
	nvme connect -t tcp -a $A -s $S -n "$PFX$1" --nr-io-queues=2
	echo "$1-connect=$?"
	dev="$(wait_dev "$PFX$1")"
	echo "$1-device=$dev"
}
detach() {
	nvme disconnect -n "$PFX$1" >/dev/null
	echo "$1-disconnect=$?"
}
sum() { dd if="$1" bs=1M count=$2 iflag=direct 2>/dev/null | md5sum | cut -c1-32; }
put() { dd if=/job/$1 of="$dev" bs=64k count=$2 seek=$3 oflag=direct conv=notrunc 2>/dev/null || echo "$4-write-error-$3=1"; }

# Delete flushes: 4 MiB written back-cached, then the host deletes the volume.
attach del
put d1 64 0 del
echo "del-sum=$(sum "$dev" 4)"
detach del
step delete

# wb -> wt: the switch flushes first; then a write-through write.
attach mode
put d1 64 0 mode
step set-mode-wt
put d2 16 64 mode
echo "mode-sum=$(sum "$dev" 5)"
detach mode
step mode-check

# Resize: 8 MiB written into 8 MiB of cache, grown to 16 MiB, 4 MiB more,
# shrunk to 4 MiB; every byte reads back after each change.
attach size
put d1 128 0 size
step grow
put d2 64 128 size
echo "size-grown=$(sum "$dev" 12)"
step shrink
echo "size-shrunk=$(sum "$dev" 12)"
detach size
step size-check

# Two volumes on one cache device: b's hot set is warm; a then runs an
# eviction storm (CPU 0) while b's hot set is read again (CPU 1).
attach b
devb=$dev
sum "$devb" 2 >/dev/null
sum "$devb" 2 >/dev/null
attach a
deva=$dev
step reset-b
taskset -c 0 sh -c 'dd if=/job/d1 of="$0" bs=1M count=16 oflag=direct conv=notrunc 2>/dev/null; dd if="$0" bs=1M count=64 iflag=direct of=/dev/null 2>/dev/null; dd if="$0" bs=1M count=64 iflag=direct of=/dev/null 2>/dev/null' "$deva" &
taskset -c 1 sh -c 'for i in 1 2 3 4 5 6; do dd if="$0" bs=64k count=32 iflag=direct of=/dev/null 2>/dev/null; done' "$devb" &
wait
step check-b
detach a
detach b
`

// TestCachedVolumeLifecycle: deleting a write-back volume flushes it
// first; switching wb to wt flushes first (no dirty bytes after); growing
// and shrinking the cache keeps every byte; and a second volume on the same
// cache device keeps all its hot set cached while the first one runs an
// eviction storm.
func TestCachedVolumeLifecycle(t *testing.T) {
	t.Parallel() // shares nothing with the other tests: see the package comment
	ceph := framework.StartCeph(t)
	dp := framework.StartDataplane(t)
	port := framework.FreeLoopbackPort(t)
	hostNQN := framework.GuestHostNQN(t)
	dir := t.TempDir()
	d1 := randomFile(t, dir, "d1", 16<<20)
	d2 := randomFile(t, dir, "d2", 4<<20)
	cacheFile := filepath.Join(dir, "cache.img")
	sparseFile(t, cacheFile, 128<<20)

	registerCeph(t, dp, ceph)
	dp.Call(t, "bdev_aio_create", map[string]any{"name": "Shared", "filename": cacheFile, "block_size": 4096}, nil)
	dp.Call(t, "nvmf_create_transport", map[string]any{"trtype": "TCP"}, nil)
	const pfx = "nqn.2026-11.io.rackcache:life-"
	vols := map[string]string{"del": "wb", "mode": "wb", "size": "wb", "a": "wt", "b": "wt"}
	for key, mode := range vols {
		newRbdImage(t, ceph, "life-"+key, 64)
		openRbd(t, dp, ceph, "Core-"+key, "life-"+key, 4096)
		dp.Call(t, "bdev_adacache_create", map[string]any{
			"name": "Vol-" + key, "core_bdev_name": "Core-" + key, "cache_bdev_name": "Shared",
			"cache_size_mib": 8, "write_mode": mode,
			"cleaning": map[string]any{"policy": "nop"}, "seq_cutoff": map[string]any{"policy": "never"},
		}, nil)
		exportToGuest(t, dp, pfx+key, "Vol-"+key, "rackcache lifecycle", port, hostNQN)
	}

	// cephHolds checks Ceph's own copy of image starts with want.
	cephHolds := func(image string, want []byte) error {
		got := rbdExport(t, ceph, image)
		if !bytes.HasPrefix(got, want) {
			return fmt.Errorf("Ceph's copy of %s differs from what the guest wrote, first at byte %d", image, firstDiff(got, want))
		}
		return nil
	}
	modeModel := append(append([]byte{}, d1[:4<<20]...), d2[:1<<20]...)
	sizeModel := append(append([]byte{}, d1[:8<<20]...), d2...)
	handle := func(step string) error {
		switch step {
		case "delete":
			if st := cacheStats(t, dp, "Vol-del"); st.DirtyBytes == 0 {
				return errors.New("Vol-del has no dirty bytes before the delete: nothing for the delete to flush")
			}
			dp.Call(t, "nvmf_delete_subsystem", map[string]any{"nqn": pfx + "del"}, nil)
			if err := callErr(dp, "bdev_adacache_delete", map[string]any{"name": "Vol-del"}, nil); err != nil {
				return fmt.Errorf("bdev_adacache_delete: %w", err)
			}
			return cephHolds("life-del", d1[:4<<20])
		case "set-mode-wt":
			if st := cacheStats(t, dp, "Vol-mode"); st.DirtyBytes == 0 {
				return errors.New("Vol-mode has no dirty bytes before the switch: nothing for it to flush")
			}
			if err := callErr(dp, "bdev_adacache_set_mode", map[string]any{"name": "Vol-mode", "write_mode": "wt"}, nil); err != nil {
				return fmt.Errorf("bdev_adacache_set_mode wt: %w", err)
			}
			st := cacheStats(t, dp, "Vol-mode")
			if st.DirtyBytes != 0 || st.WriteMode != "wt" {
				return fmt.Errorf("after switching to wt: mode %q, %d dirty bytes; want wt and 0", st.WriteMode, st.DirtyBytes)
			}
			return cephHolds("life-mode", d1[:4<<20])
		case "mode-check":
			// Written in wt: in Ceph without any flush.
			return cephHolds("life-mode", modeModel)
		case "grow", "shrink":
			mib := map[string]uint64{"grow": 16, "shrink": 4}[step]
			if err := callErr(dp, "bdev_adacache_resize", map[string]any{"name": "Vol-size", "cache_size_mib": mib}, nil); err != nil {
				return fmt.Errorf("bdev_adacache_resize to %d MiB: %w", mib, err)
			}
			if st := cacheStats(t, dp, "Vol-size"); st.Usage.CapacityBytes != mib<<20 {
				return fmt.Errorf("after resizing to %d MiB the capacity is %d bytes", mib, st.Usage.CapacityBytes)
			}
			return nil
		case "size-check":
			flushCache(t, dp, "Vol-size")
			return cephHolds("life-size", sizeModel)
		case "reset-b":
			dp.Call(t, "bdev_adacache_reset_stats", map[string]any{"name": "Vol-b"}, nil)
			return nil
		case "check-b":
			a, b := cacheStats(t, dp, "Vol-a"), cacheStats(t, dp, "Vol-b")
			t.Logf("storm volume: %s", a)
			t.Logf("hot volume:   %s", b)
			if a.Evictions.Blocks == 0 {
				return errors.New("the storm on Vol-a evicted nothing")
			}
			if b.Requests.RdTotal == 0 || b.Requests.RdMisses != 0 {
				return fmt.Errorf("Vol-b's warm hot set: %d reads, %d misses during Vol-a's storm; want reads and no miss",
					b.Requests.RdTotal, b.Requests.RdMisses)
			}
			return nil
		}
		return fmt.Errorf("unknown step %q", step)
	}
	res := framework.RunGuestWithSteps(t, framework.GuestOptions{
		Script: framework.GuestNVMeFunctions + framework.GuestStepFunctions +
			fmt.Sprintf(lifecycleJob, guestTargetAddr, guestTargetPort, pfx),
		Files: map[string]string{
			filepath.Join(dir, "d1"): "/job/d1",
			filepath.Join(dir, "d2"): "/job/d2",
		},
		GuestForwards: map[int]int{guestTargetPort: port},
		Timeout:       8 * time.Minute,
	}, handle)
	if res.ExitCode != 0 {
		t.Errorf("guest job exited with status %d", res.ExitCode)
	}
	vals := framework.GuestValues(t, res.Output)
	for k, v := range vals {
		if strings.Contains(k, "-write-error-") {
			t.Errorf("guest write failed: %s=%s", k, v)
		}
	}
	for key, want := range map[string][]byte{
		"del-sum": d1[:4<<20], "mode-sum": modeModel, "size-grown": sizeModel, "size-shrunk": sizeModel,
	} {
		s := md5.Sum(want)
		if got := vals[key]; got != hex.EncodeToString(s[:]) {
			t.Errorf("%s: read back with md5 %q, want %s", key, got, hex.EncodeToString(s[:]))
		}
	}
}
