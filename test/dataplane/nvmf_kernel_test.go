// Package dataplane_test runs rackcache-dataplane against its real
// counterparts: the Linux kernel's NVMe/TCP initiator (nvme-cli in the qemu
// guest) and a one-node Ceph behind the rbd bdev, configured through the
// operator's Go JSON-RPC client.
//
// The long tests call t.Parallel(): each starts its own dataplane (most
// also a Ceph and a guest) and shares nothing but the machine. One after
// another they made this package the last one running in `make test`
// (540 s, 227 of them TestCachedVolumeIntegrity), mostly waiting on Ceph
// and the guest; `go test` runs GOMAXPROCS of them at a time once the
// short ones are done.
package dataplane_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rackcache/rackcache/test/framework"
)

const (
	mallocNQN = "nqn.2026-11.io.rackcache:test-malloc"
	rbdNQN    = "nqn.2026-11.io.rackcache:test-rbd"
	// The guest reaches the target at 10.0.3.100:4420 through guestfwd.
	guestTargetAddr = "10.0.3.100"
	guestTargetPort = 4420
	// Another host identity, never allowed into any subsystem.
	strangerNQN = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000bad"
	strangerID  = "00000000-0000-4000-8000-000000000bad"
)

// serveOverNVMeTCP configures the dataplane: a malloc bdev and (when ceph
// is given) an rbd bdev, each in a subsystem that allows only hostNQN, both
// listening on 127.0.0.1:port and advertised as the guest sees them.
func serveOverNVMeTCP(t *testing.T, dp *framework.Dataplane, ceph *framework.Ceph, image string, port int, hostNQN string) {
	t.Helper()
	dp.Call(t, "bdev_malloc_create", map[string]any{"name": "Malloc0", "num_blocks": 16384, "block_size": 4096}, nil)
	dp.Call(t, "nvmf_create_transport", map[string]any{"trtype": "TCP"}, nil)
	subsystems := map[string]string{mallocNQN: "Malloc0"}
	if ceph != nil {
		createRbdBdev(t, dp, ceph, "Rbd0", image)
		subsystems[rbdNQN] = "Rbd0"
	}
	for nqn, bdev := range subsystems {
		exportToGuest(t, dp, nqn, bdev, "rackcache test", port, hostNQN)
	}
}

// createRbdBdev registers ceph as cluster "ceph0" (cephx, the restricted
// user) and opens image as the rbd bdev name.
func createRbdBdev(t *testing.T, dp *framework.Dataplane, ceph *framework.Ceph, name, image string) {
	t.Helper()
	dp.Call(t, "bdev_rbd_register_cluster", map[string]any{
		"name":         "ceph0",
		"user_id":      ceph.User,
		"config_param": map[string]string{"mon_host": ceph.MonHost, "key": ceph.Key},
	}, nil)
	dp.Call(t, "bdev_rbd_create", map[string]any{
		"name": name, "cluster_name": "ceph0", "pool_name": ceph.Pool, "rbd_name": image, "block_size": 4096,
	}, nil)
}

// exportToGuest serves bdev as the only namespace of subsystem nqn, to
// hostNQN only, on 127.0.0.1:port advertised as the guest reaches it.
func exportToGuest(t *testing.T, dp *framework.Dataplane, nqn, bdev, model string, port int, hostNQN string) {
	t.Helper()
	dp.Call(t, "nvmf_create_subsystem", map[string]any{
		"nqn": nqn, "serial_number": "RC" + strings.ToUpper(bdev), "model_number": model,
	}, nil)
	dp.Call(t, "nvmf_subsystem_add_ns", map[string]any{"nqn": nqn, "namespace": map[string]any{"bdev_name": bdev}}, nil)
	dp.Call(t, "nvmf_subsystem_add_host", map[string]any{"nqn": nqn, "host": hostNQN}, nil)
	dp.Call(t, "nvmf_subsystem_add_listener", listenerParams(nqn, port), nil)
}

// The guest job: discovery, then for each subsystem connect with two I/O
// queues, O_DIRECT write and verify at 4 KiB and 1 MiB (the 1 MiB writes
// from both guest CPUs at once, so both queues carry data), an idle period
// longer than half the keep-alive timeout, verify again, disconnect; and a
// stranger host that must be refused.
const kernelJob = `set -u
A=%[1]s; S=%[2]d; KATO=10
echo "--- discover"
nvme discover -t tcp -a $A -s $S
echo "discover-status=$?"
echo "--- end discover"


# check KEY NQN: write and read back the 4 KiB and 1 MiB patterns.
check() {
	key=$1 nqn=$2
	nvme connect -t tcp -a $A -s $S -n "$nqn" --nr-io-queues=2 --keep-alive-tmo=$KATO
	echo "$key-connect=$?"
	dev="$(wait_dev "$nqn")"
	[ -n "$dev" ] || { echo "$key-device=none"; return; }
	echo "$key-device=$dev"
	echo "$key-size=$(blockdev --getsize64 "$dev")"
	# The controller's queues: the admin queue plus the I/O queues granted;
	# sqsize is the queue depth minus one.
	for s in /sys/class/nvme-subsystem/nvme-subsys*; do
		[ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$nqn" ] || continue
		echo "$key-queue-count=$(cat "$s"/nvme[0-9]*/queue_count 2>/dev/null | head -n 1)"
		echo "$key-sqsize=$(cat "$s"/nvme[0-9]*/sqsize 2>/dev/null | head -n 1)"
	done
	# 4 KiB blocks scattered over the first MiB, then 4 MiB in 1 MiB I/Os.
	for b in 0 7 100 255; do
		dd if=/job/small of="$dev" bs=4096 seek=$b count=1 skip=$b oflag=direct conv=notrunc 2>/dev/null || echo "$key-write-error=4k@$b"
	done
	# 1 MiB I/Os from both CPUs at once: blk-mq maps each CPU to its own
	# I/O queue, so both queues carry data.
	taskset -c 0 dd if=/job/large of="$dev" bs=1M seek=1 count=2 oflag=direct 2>/dev/null || echo "$key-write-error=1m-cpu0" &
	taskset -c 1 dd if=/job/large of="$dev" bs=1M seek=3 skip=2 count=2 oflag=direct 2>/dev/null || echo "$key-write-error=1m-cpu1" &
	wait
	verify() {
		small=""
		for b in 0 7 100 255; do
			small="$small$(dd if="$dev" bs=4096 skip=$b count=1 iflag=direct 2>/dev/null | md5sum | cut -c1-32)"
		done
		echo "$key-$1-small=$(echo -n "$small" | md5sum | cut -c1-32)"
		echo "$key-$1-large=$(dd if="$dev" bs=1M skip=1 count=4 iflag=direct 2>/dev/null | md5sum | cut -c1-32)"
	}
	verify first
	# Idle for longer than half the keep-alive timeout: the host's own
	# keep-alives must keep the controller alive.
	sleep $((KATO / 2 + 2))
	verify idle
	for s in /sys/class/nvme-subsystem/nvme-subsys*; do
		[ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$nqn" ] || continue
		echo "$key-live=$(cat "$s"/nvme[0-9]*/state 2>/dev/null | head -n 1)"
	done
	nvme disconnect -n "$nqn" >/dev/null
	echo "$key-disconnect=$?"
}
check malloc %[3]s
%[4]s
# A host that is not on any subsystem's list.
out="$(nvme connect -t tcp -a $A -s $S -n %[3]s --hostnqn=%[5]s --hostid=%[6]s 2>&1)"
rc=$?
echo "$out" | tail -n 1
echo "stranger-connect=$rc"
echo "stranger-devices=$(find_dev %[3]s | wc -l)"
`

// expectedSmall is the md5 of the job's 4 KiB checksums, in job order.
func expectedSmall(small []byte) string {
	var all string
	for _, b := range []int{0, 7, 100, 255} {
		s := md5.Sum(small[b*4096 : (b+1)*4096])
		all += hex.EncodeToString(s[:])
	}
	s := md5.Sum([]byte(all))
	return hex.EncodeToString(s[:])
}

func TestKernelInitiatorAgainstDataplane(t *testing.T) {
	t.Parallel() // shares nothing with the other tests: see the package comment
	ceph := framework.StartCeph(t)
	image := "nvmf-test"
	if out, err := ceph.Admin(t.Context(), "rbd", "create", "--size", "64M", ceph.Pool+"/"+image); err != nil {
		t.Fatalf("create rbd image: %v\n%s", err, out)
	}
	dp := framework.StartDataplane(t)
	port := framework.FreeLoopbackPort(t)
	hostNQN := framework.GuestHostNQN(t)
	serveOverNVMeTCP(t, dp, ceph, image, port, hostNQN)

	dir := t.TempDir()
	small := make([]byte, 1<<20)
	large := make([]byte, 4<<20)
	for _, b := range [][]byte{small, large} {
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
	}
	for name, b := range map[string][]byte{"small": small, "large": large} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	job := fmt.Sprintf(kernelJob, guestTargetAddr, guestTargetPort, mallocNQN,
		"check rbd "+rbdNQN, strangerNQN, strangerID)
	res := framework.RunGuest(t, framework.GuestOptions{
		Script: framework.GuestNVMeFunctions + job,
		Files: map[string]string{
			filepath.Join(dir, "small"): "/job/small",
			filepath.Join(dir, "large"): "/job/large",
		},
		GuestForwards: map[int]int{guestTargetPort: port},
		Timeout:       6 * time.Minute,
	})
	if res.ExitCode != 0 {
		t.Fatalf("guest job exited with status %d", res.ExitCode)
	}

	discover, _, ok := strings.Cut(res.Output, "--- end discover")
	if !ok {
		t.Fatalf("no discovery output")
	}
	for _, nqn := range []string{mallocNQN, rbdNQN} {
		if !regexp.MustCompile(`(?m)^subnqn:\s+` + regexp.QuoteMeta(nqn) + `\s*$`).MatchString(discover) {
			t.Errorf("discovery log does not list %s:\n%s", nqn, discover)
		}
	}

	vals := framework.GuestValues(t, res.Output)
	wantSmall := expectedSmall(small)
	sum := md5.Sum(large)
	wantLarge := hex.EncodeToString(sum[:])
	for key, size := range map[string]int{"malloc": 64 << 20, "rbd": 64 << 20} {
		if got := vals[key+"-connect"]; got != "0" {
			t.Errorf("%s: nvme connect exited %q, want 0", key, got)
			continue
		}
		if !regexp.MustCompile(`^/dev/nvme[0-9]+n1$`).MatchString(vals[key+"-device"]) {
			t.Errorf("%s: device = %q, want /dev/nvmeXn1", key, vals[key+"-device"])
		}
		if got := vals[key+"-size"]; got != fmt.Sprint(size) {
			t.Errorf("%s: namespace size %s, want %d", key, got, size)
		}
		if got := vals[key+"-queue-count"]; got != "3" {
			t.Errorf("%s: controller has %q queues, want 3 (admin + the 2 I/O queues asked for)", key, got)
		}
		if got := vals[key+"-sqsize"]; got != "127" {
			t.Errorf("%s: sqsize %q, want 127 (queue depth 128)", key, got)
		}
		if e, bad := vals[key+"-write-error"]; bad {
			t.Errorf("%s: write failed: %s", key, e)
		}
		for _, phase := range []string{"first", "idle"} {
			if got := vals[key+"-"+phase+"-small"]; got != wantSmall {
				t.Errorf("%s (%s): 4 KiB blocks read back with md5 %s, want %s", key, phase, got, wantSmall)
			}
			if got := vals[key+"-"+phase+"-large"]; got != wantLarge {
				t.Errorf("%s (%s): 1 MiB I/Os read back with md5 %s, want %s", key, phase, got, wantLarge)
			}
		}
		if got := vals[key+"-live"]; got != "live" {
			t.Errorf("%s: controller state after the idle period = %q, want live", key, got)
		}
		if got := vals[key+"-disconnect"]; got != "0" {
			t.Errorf("%s: nvme disconnect exited %q, want 0", key, got)
		}
	}
	checkCephCopy(t, ceph, image, small, large)
	if got := vals["stranger-connect"]; got == "0" {
		t.Errorf("a host not allowed connected (nvme connect exited 0)")
	}
	if got := vals["stranger-devices"]; got != "0" {
		t.Errorf("a host not allowed got %s block devices", got)
	}
}

// checkCephCopy compares what the guest wrote through the rbd subsystem with
// Ceph's own copy of the image (`rbd export`, read from the OSDs by Ceph's
// tools), not only with what our read path returns: the 4 KiB blocks 0, 7,
// 100 and 255 of small, then large at MiB 1 to 4.
func checkCephCopy(t *testing.T, ceph *framework.Ceph, image string, small, large []byte) {
	t.Helper()
	exported := filepath.Join(t.TempDir(), "export")
	if out, err := ceph.Admin(t.Context(), "rbd", "export", ceph.Pool+"/"+image, exported); err != nil {
		t.Fatalf("rbd export: %v\n%s", err, out)
	}
	data, err := os.ReadFile(exported)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 5<<20 {
		t.Fatalf("rbd export gave %d bytes, want the 64 MiB image", len(data))
	}
	for _, b := range []int{0, 7, 100, 255} {
		if !bytes.Equal(data[b*4096:(b+1)*4096], small[b*4096:(b+1)*4096]) {
			t.Errorf("Ceph's copy of 4 KiB block %d differs from what the guest wrote", b)
		}
	}
	if !bytes.Equal(data[1<<20:5<<20], large) {
		t.Errorf("Ceph's copy of MiB 1-4 differs from what the guest wrote")
	}
}

// listenerParams listens on 127.0.0.1:port and advertises the address the
// guest reaches it at (rackcache_advertised, the dataplane's extension of
// SPDK's method), so that discovery hands the guest a usable address.
// bdevWrites is the number of writes bdev name completed (bdev_get_iostat).
func bdevWrites(ctx context.Context, dp *framework.Dataplane, name string) (int, error) {
	var stats struct {
		Bdevs []struct {
			NumWriteOps int `json:"num_write_ops"`
		} `json:"bdevs"`
	}
	if err := dp.Client.Call(ctx, "bdev_get_iostat", map[string]any{"name": name}, &stats); err != nil {
		return 0, fmt.Errorf("bdev_get_iostat %s: %w", name, err)
	}
	if len(stats.Bdevs) != 1 {
		return 0, fmt.Errorf("bdev_get_iostat %s: %d bdevs", name, len(stats.Bdevs))
	}
	return stats.Bdevs[0].NumWriteOps, nil
}

func listenerParams(nqn string, port int) map[string]any {
	return map[string]any{
		"nqn": nqn,
		"listen_address": map[string]any{
			"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": fmt.Sprint(port),
		},
		"rackcache_advertised": map[string]any{
			"traddr": guestTargetAddr, "trsvcid": fmt.Sprint(guestTargetPort),
		},
	}
}
