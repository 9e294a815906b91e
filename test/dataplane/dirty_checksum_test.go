package dataplane_test

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rackcache/rackcache/test/framework"
)

const (
	rotNQN    = "nqn.2026-11.io.rackcache:rot"
	rotBlocks = 8
	// rotBlock is the block whose bytes rot on the cache device.
	rotBlock = 3
)

// The guest job: writes rotBlocks 4 KiB blocks (acknowledged, write-back,
// never cleaned), lets the host flip a bit under one of them, reads every
// block back; lets the host flush and restart the dataplane (kill -9, the
// volume reloads from the cache file); reads again; rewrites the damaged
// block whole and reads it.
const rotJob = `set -u
A=%[1]s; S=%[2]d; NQN=%[3]s; NB=%[4]d
echo 1 > /proc/sys/kernel/printk
attach() {
	nvme connect -t tcp -a $A -s $S -n $NQN --nr-io-queues=2
	echo "connect-$1=$?"
	dev="$(wait_dev $NQN)"
	[ -n "$dev" ] || { echo "device-$1=none"; exit 1; }
}
# Block i of /job/data lives at MiB i of the device (each in a cache block
# of its own).
readall() {
	i=0
	while [ $i -lt $NB ]; do
		sum="$(dd if="$dev" bs=4096 skip=$((i * 256)) count=1 iflag=direct 2>/dev/null | md5sum | cut -c1-32)"
		dd if="$dev" of=/dev/null bs=4096 skip=$((i * 256)) count=1 iflag=direct 2>/dev/null
		echo "$1-read-$i=$? $sum"
		i=$((i + 1))
	done
}
attach 1
write_spread
step rot
echo "step-rot=$?"
readall rotted
step flush
echo "step-flush=$?"
nvme disconnect -n $NQN >/dev/null
step restart
echo "step-restart=$?"
attach 2
readall reloaded
dd if=/job/data of="$dev" bs=4096 skip=%[5]d seek=$((%[5]d * 256)) count=1 oflag=direct conv=notrunc 2>/dev/null
echo "rewrite=$?"
readall rewritten
nvme disconnect -n $NQN >/dev/null
step done
echo "step-done=$?"
`

// TestKernelHostGetsMediaErrorsOnRottedDirtyData: a bit flipped on the
// cache device under acknowledged write-back data is never served to the
// Linux initiator (its reads of that block fail with a media error, the
// other blocks read back what was written), never written to Ceph (Ceph's
// own copy keeps zeroes there while the other blocks reach it), found
// again when the volume reloads after kill -9, and healed by a rewrite.
func TestKernelHostGetsMediaErrorsOnRottedDirtyData(t *testing.T) {
	t.Parallel() // shares nothing with the other tests: see the package comment
	ceph := framework.StartCeph(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	cacheFile := filepath.Join(dir, "cache.img")
	sparseFile(t, cacheFile, 64<<20)
	data := randomFile(t, dir, "data", rotBlocks*4096)
	image := "rot"
	newRbdImage(t, ceph, image, 32)

	token := filepath.Join(dir, "metrics-token")
	const scrapeToken = "rot-test-metrics-token-0123456789"
	if err := os.WriteFile(token, []byte(scrapeToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", framework.FreeLoopbackPort(t))
	args := []string{"--config-persist", cfg, "--metrics-listen", metricsAddr, "--metrics-token-file", token}
	dp := framework.StartDataplane(t, args...)
	port := framework.FreeLoopbackPort(t)
	checkRotStats := func(when string) {
		t.Helper()
		var st struct {
			DamagedBytes uint64 `json:"damaged_bytes"`
			DirtyBytes   uint64 `json:"dirty_bytes"`
		}
		dp.Call(t, "bdev_adacache_get_stats", map[string]any{"name": "Rot0"}, &st)
		if st.DamagedBytes != 4096 || st.DirtyBytes != 4096 {
			t.Errorf("%s: damaged %d, dirty %d bytes; want 4096 each", when, st.DamagedBytes, st.DirtyBytes)
		}
		// The series are refreshed every second.
		const want = `rackcache_cache_data_checksum_errors_total{device="CacheFile"} 1`
		metrics := scrape(t, metricsAddr, scrapeToken)
		for deadline := time.Now().Add(15 * time.Second); !strings.Contains(metrics, want) && time.Now().Before(deadline); {
			time.Sleep(200 * time.Millisecond)
			metrics = scrape(t, metricsAddr, scrapeToken)
		}
		if !strings.Contains(metrics, want) {
			t.Errorf("%s: the device's data checksum counter is not 1:\n%s", when, grepLines(metrics, "checksum"))
		}
	}
	exportWriteBackOverFile(t, dp, ceph, image, cacheFile, "Rot0", rotNQN, port, map[string]any{"cleaning": map[string]any{"policy": "nop"}})

	rotted := data[rotBlock*4096 : (rotBlock+1)*4096]
	handle := func(step string) error {
		switch step {
		case "rot":
			flipBitUnder(t, cacheFile, rotted)
		case "flush":
			dp.Call(t, "bdev_adacache_flush", map[string]any{"name": "Rot0"}, nil)
			msg := waitFlushError(t, dp, "Rot0")
			if !strings.Contains(msg, "failed its checksum") || !strings.Contains(msg, fmt.Sprintf("bytes %d+4096", rotBlock<<20)) {
				t.Errorf("the flush error does not name the damaged range: %q", msg)
			}
			checkRotStats("after the flush")
			ceph := rbdExport(t, ceph, image)
			for b := range rotBlocks {
				got := ceph[b<<20 : b<<20+4096]
				want := data[b*4096 : (b+1)*4096]
				if b == rotBlock {
					want = make([]byte, 4096)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("after the flush, block %d of Ceph's copy is not what it must be (written back: %v)", b, b != rotBlock)
				}
			}
		case "restart":
			dp.Kill(t)
			dp = framework.StartDataplane(t, args...)
			checkRotStats("after the reload")
		case "done":
			flushCache(t, dp, "Rot0")
			exported := rbdExport(t, ceph, image)
			for b := range rotBlocks {
				if got := exported[b<<20 : b<<20+4096]; !bytes.Equal(got, data[b*4096:(b+1)*4096]) {
					t.Errorf("after the rewrite and a flush, block %d of Ceph's copy differs from the data", b)
				}
			}
		default:
			return fmt.Errorf("unknown step %q", step)
		}
		return nil
	}
	job := fmt.Sprintf(rotJob, guestTargetAddr, guestTargetPort, rotNQN, rotBlocks, rotBlock)
	res := framework.RunGuestWithSteps(t, framework.GuestOptions{
		Script:        framework.GuestNVMeFunctions + framework.GuestStepFunctions + spreadWriteFunction + job,
		Files:         map[string]string{filepath.Join(dir, "data"): "/job/data"},
		GuestForwards: map[int]int{guestTargetPort: port},
		Timeout:       8 * time.Minute,
	}, handle)
	if res.ExitCode != 0 {
		t.Fatalf("guest job exited with status %d", res.ExitCode)
	}
	vals := framework.GuestValues(t, res.Output)
	for _, k := range []string{"connect-1", "write", "step-rot", "step-flush", "step-restart", "connect-2", "rewrite", "step-done"} {
		if vals[k] != "0" {
			t.Errorf("guest %s=%q, want 0", k, vals[k])
		}
	}
	for _, phase := range []string{"rotted", "reloaded", "rewritten"} {
		for b := range rotBlocks {
			got := strings.Fields(vals[fmt.Sprintf("%s-read-%d", phase, b)])
			sum := md5.Sum(data[b*4096 : (b+1)*4096])
			ok := len(got) == 2 && got[0] == "0" && got[1] == hex.EncodeToString(sum[:])
			failed := len(got) == 2 && got[0] != "0"
			switch {
			case b == rotBlock && phase != "rewritten":
				if !failed {
					t.Errorf("%s: the rotted block read back %v; want a read error", phase, got)
				}
			case !ok:
				t.Errorf("%s: block %d read back %v; want status 0 and the written data", phase, b, got)
			}
		}
	}
}

// flipBitUnder flips one bit of the only copy of block in the cache file.
func flipBitUnder(t *testing.T, cacheFile string, block []byte) {
	t.Helper()
	img, err := os.ReadFile(cacheFile)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(img, block)
	if at < 0 || bytes.Contains(img[at+1:], block) {
		t.Fatalf("the block's bytes are not in the cache file exactly once (at %d)", at)
	}
	f, err := os.OpenFile(cacheFile, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if _, err := f.WriteAt([]byte{img[at+1000] ^ 0x04}, int64(at+1000)); err != nil {
		t.Fatal(err)
	}
	// The dataplane reads the file with O_DIRECT.
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	t.Logf("flipped bit 2 of cache file byte %d (block at %d)", at+1000, at)
}

// waitFlushError waits (bounded) for the running flush of name to end and
// returns its error ("" if it ended without one).
func waitFlushError(t *testing.T, dp *framework.Dataplane, name string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var st struct {
			InProgress bool    `json:"in_progress"`
			Error      *string `json:"error"`
		}
		dp.Call(t, "bdev_adacache_flush_status", map[string]any{"name": name}, &st)
		if !st.InProgress {
			if st.Error == nil {
				return ""
			}
			return *st.Error
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: flush still running after 2 minutes", name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// scrape is the dataplane's /metrics page.
func scrape(t *testing.T, addr, token string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// grepLines is the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
