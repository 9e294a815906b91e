package dataplane_test

import (
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rackcache/rackcache/test/framework"
)

// The subsystems of the durability test, each on its own bdev so that the
// counters of one bdev tell what one guest phase sent.
const (
	durFuaNQN   = "nqn.2026-11.io.rackcache:dur-fua"   // O_DSYNC|O_DIRECT writes
	durFlushNQN = "nqn.2026-11.io.rackcache:dur-flush" // plain writes, fsync, nvme flush; deallocate
	durVwcNQN   = "nqn.2026-11.io.rackcache:dur-vwc"   // write cache turned off, plain writes
	durAioNQN   = "nqn.2026-11.io.rackcache:dur-aio"   // deallocate on a file
	durRbdNQN   = "nqn.2026-11.io.rackcache:dur-rbd"   // deallocate on rbd
)

// The guest job. GNU dd (the host's, shipped as /usr/local/bin/dd: busybox
// dd has no oflag=dsync) writes with O_DSYNC|O_DIRECT, which Linux sends as
// FUA writes to a device with a volatile write cache; the host's
// util-linux blkdiscard is shipped the same way.
const durabilityJob = `set -u
A=%[1]s; S=%[2]d
GDD=/usr/local/bin/dd


find_ctrl() {
	for s in /sys/class/nvme-subsystem/nvme-subsys*; do
		[ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$1" ] || continue
		for c in "$s"/nvme[0-9]*; do
			case "${c##*/}" in nvme*n[0-9]*) continue ;; esac
			echo "/dev/${c##*/}"
			return 0
		done
	done
}

# attach KEY NQN: connects and sets $dev and $ctrl.
attach() {
	nvme connect -t tcp -a $A -s $S -n "$2" --nr-io-queues=1
	echo "$1-connect=$?"
	dev="$(wait_dev "$2")"
	ctrl="$(find_ctrl "$2")"
	echo "$1-device=$dev"
	echo "$1-ctrl=$ctrl"
}

detach() {
	nvme disconnect -n "$2" >/dev/null
	echo "$1-disconnect=$?"
}

# dealloc KEY: 16 blocks of pattern, then blocks 2 (blkdiscard) and 5
# (nvme dsm --ad) deallocated; prints the md5 of what reads back.
dealloc() {
	$GDD if=/job/pattern of="$dev" bs=4096 count=16 oflag=direct conv=notrunc 2>/dev/null || echo "$1-write-error=pattern"
	/usr/local/bin/blkdiscard -o 8192 -l 4096 "$dev"
	echo "$1-blkdiscard=$?"
	nvme dsm "$dev" --ad --slbs=5 --blocks=1 >/dev/null
	echo "$1-dsm=$?"
	echo "$1-dealloc=$($GDD if="$dev" bs=4096 count=16 iflag=direct 2>/dev/null | md5sum | cut -c1-32)"
}

attach fua %[3]s
$GDD if=/job/pattern of="$dev" bs=4096 count=3 oflag=direct,dsync conv=notrunc 2>/dev/null || echo "fua-write-error=dsync"
detach fua %[3]s

attach flush %[4]s
$GDD if=/job/pattern of="$dev" bs=4096 count=2 oflag=direct conv=notrunc 2>/dev/null || echo "flush-write-error=plain"
# fsync of the block device: a Flush.
$GDD if=/dev/null of="$dev" count=0 conv=notrunc,fsync 2>/dev/null || echo "flush-write-error=fsync"
nvme flush "$dev" >/dev/null
echo "flush-nvme-flush=$?"
dealloc malloc
detach flush %[4]s

attach vwc %[5]s
nvme set-feature "$ctrl" --feature-id=6 --value=0
echo "vwc-set=$?"
echo "vwc-get=$(nvme get-feature "$ctrl" --feature-id=6 2>&1 | sed -n 's/.*[Cc]urrent value: *\(0x\)\{0,1\}\([0-9a-fA-F]*\).*/\2/p' | head -n 1)"
echo "vwc-advertised=$(nvme id-ctrl "$ctrl" 2>/dev/null | sed -n 's/^vwc *: *\(.*\)$/\1/p')"
$GDD if=/job/pattern of="$dev" bs=4096 count=4 oflag=direct conv=notrunc 2>/dev/null || echo "vwc-write-error=plain"
detach vwc %[5]s

attach aio %[6]s
dealloc aio
detach aio %[6]s

attach rbd %[7]s
dealloc rbd
detach rbd %[7]s
`

// iostat is one bdev of bdev_get_iostat (num_flush_ops and
// num_fua_write_ops are the dataplane's additions to SPDK's fields).
type iostat struct {
	Name           string `json:"name"`
	NumWriteOps    uint64 `json:"num_write_ops"`
	NumFlushOps    uint64 `json:"num_flush_ops"`
	NumFuaWriteOps uint64 `json:"num_fua_write_ops"`
	NumUnmapOps    uint64 `json:"num_unmap_ops"`
}

func bdevIostat(t *testing.T, dp *framework.Dataplane, name string) iostat {
	t.Helper()
	var res struct {
		Bdevs []iostat `json:"bdevs"`
	}
	dp.Call(t, "bdev_get_iostat", map[string]any{"name": name}, &res)
	if len(res.Bdevs) != 1 || res.Bdevs[0].Name != name {
		t.Fatalf("bdev_get_iostat %s: %+v", name, res.Bdevs)
	}
	return res.Bdevs[0]
}

// TestKernelInitiatorDurability: through the Linux NVMe/TCP initiator,
// O_DSYNC|O_DIRECT writes arrive at the base bdev as FUA writes and fsync
// and nvme flush as Flushes; with the volatile write cache turned off every
// write is durable; deallocated blocks read back as zeroes on malloc, file
// and rbd bdevs.
func TestKernelInitiatorDurability(t *testing.T) {
	t.Parallel() // shares nothing with the other tests: see the package comment
	ceph := framework.StartCeph(t)
	image := "durability"
	if out, err := ceph.Admin(t.Context(), "rbd", "create", "--size", "64M", ceph.Pool+"/"+image); err != nil {
		t.Fatalf("create rbd image: %v\n%s", err, out)
	}
	gdd := framework.RequireCommand(t, "dd")
	blkdiscard := framework.RequireCommand(t, "blkdiscard")
	dp := framework.StartDataplane(t)
	port := framework.FreeLoopbackPort(t)
	hostNQN := framework.GuestHostNQN(t)
	dir := t.TempDir()

	file := filepath.Join(dir, "aio.img")
	sparseFile(t, file, 64<<20)
	for _, m := range []string{"DurFua", "DurFlush", "DurVwc"} {
		dp.Call(t, "bdev_malloc_create", map[string]any{"name": m, "num_blocks": 16384, "block_size": 4096}, nil)
	}
	dp.Call(t, "bdev_aio_create", map[string]any{"name": "DurAio", "filename": file, "block_size": 4096}, nil)
	createRbdBdev(t, dp, ceph, "DurRbd", image)
	dp.Call(t, "nvmf_create_transport", map[string]any{"trtype": "TCP"}, nil)
	subsystems := map[string]string{
		durFuaNQN: "DurFua", durFlushNQN: "DurFlush", durVwcNQN: "DurVwc", durAioNQN: "DurAio", durRbdNQN: "DurRbd",
	}
	for nqn, bdev := range subsystems {
		exportToGuest(t, dp, nqn, bdev, "rackcache durability", port, hostNQN)
	}

	pattern := make([]byte, 16*4096)
	if _, err := rand.Read(pattern); err != nil {
		t.Fatal(err)
	}
	// Never zero where the test expects zeroes to be proof of deallocation.
	for i := range pattern {
		pattern[i] |= 1
	}
	patternFile := filepath.Join(dir, "pattern")
	if err := os.WriteFile(patternFile, pattern, 0o644); err != nil {
		t.Fatal(err)
	}
	job := fmt.Sprintf(durabilityJob, guestTargetAddr, guestTargetPort,
		durFuaNQN, durFlushNQN, durVwcNQN, durAioNQN, durRbdNQN)
	res := framework.RunGuest(t, framework.GuestOptions{
		Script:        framework.GuestNVMeFunctions + job,
		Files:         map[string]string{patternFile: "/job/pattern"},
		Binaries:      []string{gdd, blkdiscard},
		GuestForwards: map[int]int{guestTargetPort: port},
		Timeout:       5 * time.Minute,
	})
	if res.ExitCode != 0 {
		t.Fatalf("guest job exited with status %d", res.ExitCode)
	}
	vals := framework.GuestValues(t, res.Output)
	for _, k := range []string{"fua", "flush", "vwc", "aio", "rbd"} {
		if vals[k+"-connect"] != "0" || vals[k+"-device"] == "" {
			t.Fatalf("%s: connect %q, device %q", k, vals[k+"-connect"], vals[k+"-device"])
		}
		if got := vals[k+"-disconnect"]; got != "0" {
			t.Errorf("%s: nvme disconnect exited %q", k, got)
		}
	}
	for k, v := range vals {
		if strings.HasSuffix(k, "-write-error") {
			t.Errorf("guest write failed: %s=%s", k, v)
		}
	}

	// O_DSYNC|O_DIRECT: three FUA writes.
	fua := bdevIostat(t, dp, "DurFua")
	if fua.NumWriteOps != 3 || fua.NumFuaWriteOps != 3 {
		t.Errorf("O_DSYNC writes: %d writes, %d FUA writes at the bdev; want 3 and 3", fua.NumWriteOps, fua.NumFuaWriteOps)
	}
	// Plain writes stay plain; fsync and nvme flush each reach the bdev as
	// a Flush.
	fl := bdevIostat(t, dp, "DurFlush")
	if fl.NumFuaWriteOps != 0 {
		t.Errorf("plain writes with the write cache on: %d FUA writes at the bdev, want 0", fl.NumFuaWriteOps)
	}
	if vals["flush-nvme-flush"] != "0" {
		t.Errorf("nvme flush exited %q", vals["flush-nvme-flush"])
	}
	if fl.NumFlushOps < 2 {
		t.Errorf("fsync and nvme flush: %d flushes at the bdev, want at least 2", fl.NumFlushOps)
	}
	// Write cache off: every write durable; Get Features says so, Identify
	// still advertises the cache.
	vwc := bdevIostat(t, dp, "DurVwc")
	if vals["vwc-set"] != "0" {
		t.Errorf("nvme set-feature -f 6 -v 0 exited %q", vals["vwc-set"])
	}
	if v, err := strconv.ParseUint(vals["vwc-get"], 16, 32); err != nil || v != 0 {
		t.Errorf("Get Features VWC after turning it off: %q, want 0", vals["vwc-get"])
	}
	if v, err := strconv.ParseUint(vals["vwc-advertised"], 0, 32); err != nil || v&1 != 1 {
		t.Errorf("Identify VWC: %q, want bit 0 set", vals["vwc-advertised"])
	}
	if vwc.NumWriteOps != 4 || vwc.NumFuaWriteOps != 4 {
		t.Errorf("write cache off: %d writes, %d FUA writes at the bdev; want 4 and 4", vwc.NumWriteOps, vwc.NumFuaWriteOps)
	}

	// Deallocated blocks 2 and 5 read back as zeroes, the others as written.
	want := append([]byte(nil), pattern...)
	for _, b := range []int{2, 5} {
		clear(want[b*4096 : (b+1)*4096])
	}
	sum := md5.Sum(want)
	wantSum := hex.EncodeToString(sum[:])
	for key, bdev := range map[string]string{"malloc": "DurFlush", "aio": "DurAio", "rbd": "DurRbd"} {
		if vals[key+"-blkdiscard"] != "0" || vals[key+"-dsm"] != "0" {
			t.Errorf("%s: blkdiscard exited %q, nvme dsm %q", key, vals[key+"-blkdiscard"], vals[key+"-dsm"])
		}
		if got := vals[key+"-dealloc"]; got != wantSum {
			t.Errorf("%s: after deallocating blocks 2 and 5 the 16 blocks read back with md5 %s, want %s (zeroes there)", key, got, wantSum)
		}
		if s := bdevIostat(t, dp, bdev); s.NumUnmapOps < 2 {
			t.Errorf("%s: %d deallocate operations at the bdev, want at least 2", key, s.NumUnmapOps)
		}
	}
}
