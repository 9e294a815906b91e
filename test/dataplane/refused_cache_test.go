package dataplane_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rackcache/rackcache/test/framework"
)

const refusedNQN = "nqn.2026-11.io.rackcache:refused"

// The guest job: writes 4 KiB blocks (acknowledged write-back data, never
// cleaned), disconnects; the host damages the cache's metadata and
// restarts the dataplane; the guest connects again and must find no
// namespace at all, rather than one serving stale or partial data.
const refusedJob = `set -u
A=%[1]s; S=%[2]d; NQN=%[3]s; NB=%[4]d
echo 1 > /proc/sys/kernel/printk
nvme connect -t tcp -a $A -s $S -n $NQN --nr-io-queues=2
echo "connect-1=$?"
dev="$(wait_dev $NQN)"
[ -n "$dev" ] || { echo "device-1=none"; exit 1; }
write_spread
nvme disconnect -n $NQN >/dev/null
step refuse
echo "step-refuse=$?"
nvme connect -t tcp -a $A -s $S -n $NQN --nr-io-queues=2 >/dev/null 2>&1
echo "connect-2=$?"
echo "devices-2=$(wait_dev $NQN | wc -w)"
nvme disconnect -n $NQN >/dev/null 2>&1
step done
echo "step-done=$?"
`

// TestKernelHostNeverSeesARefusedCache: a write-back volume whose cache
// metadata is damaged where its newest version was (here every copy of
// its units zeroed while the dataplane was down) is not served after the
// restart: the Linux initiator finds its subsystem without a namespace,
// the failed creation is kept and reported (EUCLEAN), nothing on the
// cache device is changed or reformatted, and nothing reaches Ceph.
func TestKernelHostNeverSeesARefusedCache(t *testing.T) {
	t.Parallel() // shares nothing with the other tests: see the package comment
	ceph := framework.StartCeph(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	cacheFile := filepath.Join(dir, "cache.img")
	sparseFile(t, cacheFile, 64<<20)
	const blocks = 4
	data := randomFile(t, dir, "data", blocks*4096)
	image := "refused"
	newRbdImage(t, ceph, image, 32)

	dp := framework.StartDataplane(t, "--config-persist", cfg)
	port := framework.FreeLoopbackPort(t)
	exportWriteBackOverFile(t, dp, ceph, image, cacheFile, "Refused0", refusedNQN, port, map[string]any{"cleaning": map[string]any{"policy": "nop"}})

	var damaged []byte
	handle := func(step string) error {
		switch step {
		case "refuse":
			dp.Kill(t)
			// The metadata area starts at 1 MiB, 16 KiB per unit (both
			// copies); the volume owns the device's first 16 units.
			zeroFileRange(t, cacheFile, 1<<20, 16*16<<10)
			img, err := os.ReadFile(cacheFile)
			if err != nil {
				t.Fatal(err)
			}
			damaged = img
			dp = framework.StartDataplane(t, "--config-persist", cfg)
		case "done":
			var kept []struct {
				Method  string `json:"method"`
				Object  string `json:"object"`
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			dp.Call(t, "rackcache_get_config_errors", nil, &kept)
			found := false
			for _, k := range kept {
				if k.Method == "bdev_adacache_create" && k.Object == "Refused0" {
					found = true
					if k.Code != -117 || !strings.Contains(k.Message, "not loaded") {
						t.Errorf("the refused creation is kept with code %d (want -117, EUCLEAN): %s", k.Code, k.Message)
					}
				}
			}
			if !found {
				t.Errorf("the refused volume's creation is not among the kept config errors: %+v", kept)
			}
			var bdevs []map[string]any
			if err := callErr(dp, "bdev_adacache_get_bdevs", map[string]any{"name": "Refused0"}, &bdevs); err == nil && len(bdevs) > 0 {
				t.Errorf("the refused volume is served: %v", bdevs)
			}
			now, err := os.ReadFile(cacheFile)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(now, damaged) {
				t.Errorf("the cache device changed after the refusal (first at byte %d): nothing may be written or formatted", firstDiff(now, damaged))
			}
			for b := range blocks {
				if !bytes.Contains(now, data[b*4096:(b+1)*4096]) {
					t.Errorf("block %d's acknowledged data is gone from the cache device", b)
				}
			}
			exported := rbdExport(t, ceph, image)
			if !bytes.Equal(exported[:4<<20], make([]byte, 4<<20)) {
				t.Errorf("data reached Ceph from a cache that cannot be vouched for")
			}
		default:
			return fmt.Errorf("unknown step %q", step)
		}
		return nil
	}
	job := fmt.Sprintf(refusedJob, guestTargetAddr, guestTargetPort, refusedNQN, blocks)
	res := framework.RunGuestWithSteps(t, framework.GuestOptions{
		Script:        framework.GuestNVMeFunctions + framework.GuestStepFunctions + spreadWriteFunction + job,
		Files:         map[string]string{filepath.Join(dir, "data"): "/job/data"},
		GuestForwards: map[int]int{guestTargetPort: port},
		Timeout:       6 * time.Minute,
	}, handle)
	// The restarted dataplane opened the image seconds after its killed
	// predecessor: librbd's close would wait out that client's watch on the
	// OSDs (about 30 s), longer than a graceful stop is given.
	dp.Kill(t)
	if res.ExitCode != 0 {
		t.Fatalf("guest job exited with status %d", res.ExitCode)
	}
	vals := framework.GuestValues(t, res.Output)
	for k, want := range map[string]string{"connect-1": "0", "write": "0", "step-refuse": "0", "devices-2": "0", "step-done": "0"} {
		if vals[k] != want {
			t.Errorf("guest %s=%q, want %s", k, vals[k], want)
		}
	}
}

// zeroFileRange writes n zero bytes at off of path (a fault injected on a
// device while its dataplane is down).
func zeroFileRange(t *testing.T, path string, off, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if _, err := f.WriteAt(make([]byte, n), off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}
