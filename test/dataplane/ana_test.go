package dataplane_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rackcache/rackcache/test/framework"
)

const anaNQN = "nqn.2026-11.io.rackcache:test-ana"

// The guest's second path to the target (guestfwd to the second listener).
const guestSecondPort = 4421

// The guest job: connect one subsystem through two ports (the kernel's
// native multipath puts both controllers under one namespace head), write
// through the head, then wait, with no I/O of its own, until the kernel
// shows path A inaccessible (only an ANA change notice can tell it), and
// read and write through the head again (the kernel must use path B).
const anaJob = `set -u
A=%[1]s; SA=%[2]d; SB=%[3]d; NQN=%[4]s
echo "multipath=$(cat /sys/module/nvme_core/parameters/multipath 2>/dev/null)"
for s in $SA $SB; do
	nvme connect -t tcp -a $A -s $s -n $NQN --ctrl-loss-tmo=30 --reconnect-delay=1
	echo "connect-$s=$?"
done
i=0
while { [ -z "$(headdev)" ] || [ "$(ana $SB)" = none ]; } && [ $i -lt 100 ]; do sleep 0.2; i=$((i + 1)); done
DEV="$(headdev)"
echo "paths=$(ls "$(subsys)"/nvme*/address 2>/dev/null | wc -l)"
echo "ana-a-before=$(ana $SA)"
echo "ana-b-before=$(ana $SB)"
# The data comes from the host (/job/data), not the guest's /dev/urandom:
# a read of it racing with the kernel's "crng init done" once crashed the
# TCG guest (int3 in urandom_read_iter, a text patch under emulation).
dd if=/job/data of="$DEV" bs=65536 count=16 oflag=direct 2>/dev/null
echo "first-write=$?"
# The host test makes path A inaccessible once it sees that write.
i=0
while [ "$(ana $SA)" != inaccessible ] && [ $i -lt 150 ]; do sleep 0.2; i=$((i + 1)); done
echo "ana-a-after=$(ana $SA)"
echo "ana-b-after=$(ana $SB)"
dd if=/job/data of="$DEV" bs=65536 skip=16 seek=16 count=16 oflag=direct 2>/dev/null
echo "second-write=$?"
dd if="$DEV" of=/tmp/back bs=65536 count=32 iflag=direct 2>/dev/null
echo "read-back=$?"
head -c 2097152 /job/data | cmp -s - /tmp/back && echo "read-back-data=same" || echo "read-back-data=differs"
nvme disconnect -n $NQN >/dev/null
echo "disconnect=$?"
`

// One subsystem with ANA reporting on two listeners of one dataplane: the
// Linux host's native multipath joins both paths under one namespace head;
// making one listener inaccessible reaches the host by an ANA change
// notice (the guest waits for it with no I/O of its own), and the host's
// I/O then goes through the other path with nothing lost: what it wrote
// is in the backing file.
func TestKernelMultipathFollowsANAStates(t *testing.T) {
	t.Parallel() // shares nothing with the other tests: see the package comment
	dp := framework.StartDataplane(t)
	portA := framework.FreeLoopbackPort(t)
	portB := framework.FreeLoopbackPort(t)
	hostNQN := framework.GuestHostNQN(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "ana.img")
	sparseFile(t, file, 16<<20)
	data, dataPath := randomDataFile(t, dir)

	dp.Call(t, "bdev_aio_create", map[string]any{"name": "AnaAio", "filename": file, "block_size": 4096}, nil)
	dp.Call(t, "nvmf_create_transport", map[string]any{"trtype": "TCP"}, nil)
	dp.Call(t, "nvmf_create_subsystem", map[string]any{
		"nqn": anaNQN, "serial_number": "RCANA", "ana_reporting": true,
	}, nil)
	dp.Call(t, "nvmf_subsystem_add_ns", map[string]any{"nqn": anaNQN, "namespace": map[string]any{"bdev_name": "AnaAio"}}, nil)
	dp.Call(t, "nvmf_subsystem_add_host", map[string]any{"nqn": anaNQN, "host": hostNQN}, nil)
	address := func(port int) map[string]any {
		return map[string]any{"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": fmt.Sprint(port)}
	}
	for _, port := range []int{portA, portB} {
		dp.Call(t, "nvmf_subsystem_add_listener", map[string]any{"nqn": anaNQN, "listen_address": address(port)}, nil)
	}

	// Path A goes inaccessible once the guest has written through it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed := make(chan error, 1)
	go func() {
		for {
			writes, err := bdevWrites(ctx, dp, "AnaAio")
			if err != nil {
				changed <- err
				return
			}
			if writes > 0 {
				break
			}
			select {
			case <-ctx.Done():
				changed <- fmt.Errorf("the guest never wrote")
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		changed <- dp.Client.Call(ctx, "nvmf_subsystem_listener_set_ana_state", map[string]any{
			"nqn": anaNQN, "listen_address": address(portA), "ana_state": "inaccessible",
		}, nil)
	}()

	job := fmt.Sprintf(anaJob, guestTargetAddr, guestTargetPort, guestSecondPort, anaNQN)
	res := framework.RunGuest(t, framework.GuestOptions{
		Script:        framework.GuestMultipathFunctions + job,
		GuestForwards: map[int]int{guestTargetPort: portA, guestSecondPort: portB},
		Files:         map[string]string{dataPath: "/job/data"},
		Timeout:       6 * time.Minute,
	})
	cancel()
	if err := <-changed; err != nil {
		t.Errorf("making path A inaccessible: %v", err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("guest job exited with status %d", res.ExitCode)
	}
	vals := framework.GuestValues(t, res.Output)
	for key, want := range map[string]string{
		"multipath":                              "Y",
		"connect-" + fmt.Sprint(guestTargetPort): "0",
		"connect-" + fmt.Sprint(guestSecondPort): "0",
		"paths":                                  "2",
		"ana-a-before":                           "optimized",
		"ana-b-before":                           "optimized",
		"first-write":                            "0",
		"ana-a-after":                            "inaccessible",
		"ana-b-after":                            "optimized",
		"second-write":                           "0",
		"read-back":                              "0",
		"read-back-data":                         "same",
		"disconnect":                             "0",
	} {
		if got := vals[key]; got != want {
			t.Errorf("guest %s = %q, want %q", key, got, want)
		}
	}
	// What the guest wrote is in the backing file, read here, not through
	// the target.
	got := make([]byte, 2<<20)
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if _, err := io.ReadFull(f, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data[:2<<20]) {
		t.Errorf("the backing file's first 2 MiB are not what the guest wrote")
	}
}
