package dataplane_test

import (
	"bytes"
	"cmp"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rackcache/rackcache/test/framework"
)

// The integrity test's cached volumes use the first cachedRegion bytes of
// a cachedImageMiB image, with a cache of cachedCacheMiB: the working set is
// four times the cache, so volumes that cache writes evict (write-back:
// dirty blocks are written back before their space is reused).
const (
	cachedImageMiB = 32
	cachedRegion   = 16 << 20
	cachedCacheMiB = 4
	// The core bdevs have 512-byte sectors so that the guest's O_DIRECT
	// writes at 512-byte offsets reach the cache as such.
	cachedSector = 512
)

// ddOp is one GNU-style dd of the guest: count blocks of bs bytes from
// /job/SRC at block skip to the device at block seek, with O_DIRECT.
type ddOp struct {
	src                   string
	bs, skip, seek, count int
}

// integrityPhases are the guest's writes: per phase, what each guest CPU
// writes (the two CPUs' ranges are disjoint, and run in parallel).
var integrityPhases = [][2][]ddOp{
	// Fill the whole region: 1 MiB writes from CPU 0, 64 KiB from CPU 1.
	{
		{{"d1", 1 << 20, 0, 0, 8}},
		{{"d1", 64 << 10, 128, 128, 128}},
	},
	// Overwrites: 4 KiB writes inside larger cache blocks and a 1 MiB
	// range in 128 KiB writes (CPU 0); 512-byte-aligned writes of odd
	// lengths at odd sector offsets, one across a 32 KiB boundary and one
	// across a MiB boundary (CPU 1).
	{
		{{"d2", 4096, 0, 512, 256}, {"d2", 128 << 10, 8, 32, 8}},
		{
			{"d2", 512, 4096, 10*2048 + 1, 9},
			{"d2", 512, 4200, 12*2048 + 3, 3},
			{"d2", 512, 4207, 12*2048 + 520, 4},
			{"d2", 512, 4214, 12*2048 + 1037, 5},
			{"d2", 512, 4221, 12*2048 + 1554, 6},
			{"d2", 512, 4300, 9*2048 + 63, 2},
			{"d2", 512, 4400, 15*2048 - 1, 4},
		},
	},
	// Rewrite ranges evicted since: 1 MiB writes (CPU 0), 8 KiB (CPU 1).
	{
		{{"d2", 1 << 20, 0, 6, 2}},
		{{"d2", 8192, 256, 13 * 128, 128}},
	},
}

// apply is ddOp on the host's model of the device.
func (o ddOp) apply(dev []byte, files map[string][]byte) {
	src := files[o.src][o.skip*o.bs : (o.skip+o.count)*o.bs]
	copy(dev[o.seek*o.bs:], src)
}

func (o ddOp) guest(key, tag string) string {
	return fmt.Sprintf(`dd if=/job/%s of="$0" bs=%d skip=%d seek=%d count=%d oflag=direct conv=notrunc 2>/dev/null || echo %s-write-error-%s=1`,
		o.src, o.bs, o.skip, o.seek, o.count, key, tag)
}

// integrityGuestPhase is the guest's script for one phase on $dev.
func integrityGuestPhase(key string, n int, p [2][]ddOp) string {
	var b strings.Builder
	for cpu, ops := range p {
		cmds := make([]string, len(ops))
		for i, o := range ops {
			cmds[i] = o.guest(key, fmt.Sprintf("p%d-cpu%d-%d", n, cpu, i))
		}
		fmt.Fprintf(&b, "taskset -c %d sh -c '%s' \"$dev\" &\n", cpu, strings.Join(cmds, "; "))
	}
	b.WriteString("wait\n")
	return b.String()
}

// Guest functions of the integrity job: attach and detach a subsystem, and
// verify KEY TAG, which prints the md5 of each MiB of the region read back
// with O_DIRECT, the first half from CPU 0 and the second from CPU 1.
const integrityFunctions = `set -u
A=%[1]s; S=%[2]d
attach() {
	nvme connect -t tcp -a $A -s $S -n "$2" --nr-io-queues=2
	echo "$1-connect=$?"
	dev="$(wait_dev "$2")"
	[ -n "$dev" ] || { echo "$1-device=none"; return 1; }
	echo "$1-device=$dev"
}
detach() {
	nvme disconnect -n "$2" >/dev/null
	echo "$1-disconnect=$?"
}
verify() {
	for cpu in 0 1; do
		taskset -c $cpu sh -c 'i=$3; while [ $i -lt $4 ]; do echo "$1-$2-$i=$(dd if="$0" bs=1M skip=$i count=1 iflag=direct 2>/dev/null | md5sum | cut -c1-32)"; i=$((i + 1)); done' "$dev" "$1" "$2" $((cpu * 8)) $((cpu * 8 + 8)) &
	done
	wait
}
`

// cachedCase is one cached volume of the integrity matrix.
type cachedCase struct {
	key    string
	params map[string]any
	// evicts: the volume must have evicted (it caches every write).
	evicts bool
	// cacheBlock is the cache bdev's block size (default cachedSector).
	cacheBlock int
}

var integrityCases = []cachedCase{
	{key: "wt-adaptive", params: map[string]any{"write_mode": "wt", "mode": "adaptive"}, evicts: true},
	{key: "wb-fixed-lazy", params: map[string]any{
		"write_mode": "wb", "mode": "fixed", "block_sizes_kib": []int{32}, "eviction": "lazy",
		"cleaning": map[string]any{"policy": "nop"},
	}, evicts: true},
	{key: "wb-adaptive-tinylfu", params: map[string]any{
		"write_mode": "wb", "mode": "adaptive", "admission": "tinylfu",
		"cleaning": map[string]any{"policy": "aggressive"},
	}},
	{key: "wa-nhit", params: map[string]any{"write_mode": "wa", "mode": "adaptive", "admission": "nhit:2"}},
	{key: "pt-fixed", params: map[string]any{
		"write_mode": "pt", "mode": "fixed", "block_sizes_kib": []int{64},
		"seq_cutoff": map[string]any{"policy": "always", "threshold_kib": 256},
	}},
	// A cache device with 4 KiB blocks (an SSD's) under a core with
	// 512-byte sectors: every write must work. (The volume now exposes
	// 4 KiB blocks, and the guest's 512-byte writes become the kernel's
	// read-modify-write; before, it exposed 512-byte sectors, failed those
	// writes with Invalid Field and fell back to pass-through.)
	{key: "wt-4k-cache", params: map[string]any{"write_mode": "wt", "mode": "adaptive"}, cacheBlock: 4096},
}

// TestCachedVolumeIntegrity: through the Linux NVMe/TCP initiator, cached
// volumes over RBD in every write mode, fixed and adaptive, with the nhit
// and tinylfu admissions and lazy eviction, read back exactly what both
// guest CPUs wrote (whole, partial, overwritten and 512-byte-unaligned
// ranges) with a working set four times the cache; after a flush Ceph's
// own copy of each image holds every byte.
func TestCachedVolumeIntegrity(t *testing.T) {
	t.Parallel() // shares nothing with the other tests: see the package comment
	ceph := framework.StartCeph(t)
	dp := framework.StartDataplane(t)
	port := framework.FreeLoopbackPort(t)
	hostNQN := framework.GuestHostNQN(t)
	dir := t.TempDir()
	files := map[string][]byte{
		"d1": randomFile(t, dir, "d1", cachedRegion),
		"d2": randomFile(t, dir, "d2", 4<<20),
	}

	registerCeph(t, dp, ceph)
	dp.Call(t, "nvmf_create_transport", map[string]any{"trtype": "TCP"}, nil)
	job := fmt.Sprintf(integrityFunctions, guestTargetAddr, guestTargetPort)
	for i, c := range integrityCases {
		image := "cached-" + c.key
		newRbdImage(t, ceph, image, cachedImageMiB)
		core, cache, name := fmt.Sprintf("Core%d", i), fmt.Sprintf("CacheDev%d", i), fmt.Sprintf("Cached%d", i)
		openRbd(t, dp, ceph, core, image, cachedSector)
		cacheBlock := cmp.Or(c.cacheBlock, cachedSector)
		dp.Call(t, "bdev_malloc_create", map[string]any{
			"name": cache, "num_blocks": (16 << 20) / cacheBlock, "block_size": cacheBlock,
		}, nil)
		params := map[string]any{
			"name": name, "core_bdev_name": core, "cache_bdev_name": cache, "cache_size_mib": cachedCacheMiB,
			"seq_cutoff": map[string]any{"policy": "never"},
		}
		for k, v := range c.params {
			params[k] = v
		}
		dp.Call(t, "bdev_adacache_create", params, nil)
		nqn := "nqn.2026-11.io.rackcache:cached-" + c.key
		exportToGuest(t, dp, nqn, name, "rackcache cached", port, hostNQN)

		job += fmt.Sprintf("attach %s %s && {\n", c.key, nqn)
		for n, p := range integrityPhases {
			job += integrityGuestPhase(c.key, n, p)
			if n == 0 || n == len(integrityPhases)-1 {
				job += fmt.Sprintf("verify %s p%d\n", c.key, n)
			}
		}
		job += fmt.Sprintf("detach %s %s\n}\n", c.key, nqn)
	}

	res := framework.RunGuest(t, framework.GuestOptions{
		Script: framework.GuestNVMeFunctions + job,
		Files: map[string]string{
			filepath.Join(dir, "d1"): "/job/d1",
			filepath.Join(dir, "d2"): "/job/d2",
		},
		GuestForwards: map[int]int{guestTargetPort: port},
		Timeout:       10 * time.Minute,
	})
	if res.ExitCode != 0 {
		t.Fatalf("guest job exited with status %d", res.ExitCode)
	}
	vals := framework.GuestValues(t, res.Output)
	for k, v := range vals {
		if strings.Contains(k, "-write-error-") {
			t.Errorf("guest write failed: %s=%s", k, v)
		}
	}

	// The host's model of the region after each phase.
	model := make([]byte, cachedRegion)
	want := map[int][]string{}
	for n, p := range integrityPhases {
		for _, ops := range p {
			for _, o := range ops {
				o.apply(model, files)
			}
		}
		want[n] = mibSums(model)
	}
	for i, c := range integrityCases {
		name := fmt.Sprintf("Cached%d", i)
		if vals[c.key+"-connect"] != "0" || vals[c.key+"-disconnect"] != "0" {
			t.Errorf("%s: connect %q, disconnect %q", c.key, vals[c.key+"-connect"], vals[c.key+"-disconnect"])
			continue
		}
		for _, n := range []int{0, len(integrityPhases) - 1} {
			for mib, sum := range want[n] {
				if got := vals[fmt.Sprintf("%s-p%d-%d", c.key, n, mib)]; got != sum {
					t.Errorf("%s: after phase %d, MiB %d read back with md5 %q, want %s", c.key, n, mib, got, sum)
				}
			}
		}
		st := cacheStats(t, dp, name)
		t.Logf("%s: %s", c.key, st)
		if st.Errors.Total != 0 {
			t.Errorf("%s: %d I/O errors counted", c.key, st.Errors.Total)
		}
		if c.evicts && st.Evictions.Blocks == 0 {
			t.Errorf("%s: a working set four times the cache evicted nothing", c.key)
		}
		flushCache(t, dp, name)
		data := rbdExport(t, ceph, "cached-"+c.key)
		if len(data) != cachedImageMiB<<20 {
			t.Fatalf("%s: rbd export gave %d bytes, want %d", c.key, len(data), cachedImageMiB<<20)
		}
		if !bytes.Equal(data[:cachedRegion], model) {
			t.Errorf("%s: after the flush Ceph's copy differs from what the guest wrote, first at byte %d",
				c.key, firstDiff(data, model))
		}
		if !bytes.Equal(data[cachedRegion:], make([]byte, len(data)-cachedRegion)) {
			t.Errorf("%s: Ceph's copy has data past the region the guest wrote", c.key)
		}
	}
}

// mibSums is the md5 of each MiB of b.
func mibSums(b []byte) []string {
	var sums []string
	for off := 0; off < len(b); off += 1 << 20 {
		s := md5.Sum(b[off : off+1<<20])
		sums = append(sums, hex.EncodeToString(s[:]))
	}
	return sums
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
