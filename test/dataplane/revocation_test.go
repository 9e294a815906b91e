package dataplane_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rackcache/rackcache/test/framework"
)

// The guest reaches the discovery listener at 10.0.3.100:8009 (SPDK's and
// nvme-cli's well-known discovery port) through guestfwd.
const guestDiscoveryPort = 8009

// The guest job: `nvme discover` and `nvme connect-all` through the
// discovery subsystem's own listener, then wait (bounded) for the host to
// revoke the controller, report what the kernel saw, and try to come back.
const revocationJob = `set -u
A=%[1]s; D=%[2]d; S=%[3]d; NQN=%[4]s
echo "--- discover"
nvme discover -t tcp -a $A -s $D
echo "discover-status=$?"
echo "--- end discover"
nvme connect-all -t tcp -a $A -s $D --ctrl-loss-tmo=3 --reconnect-delay=1
echo "connect-all=$?"

# state: the state of NQN's controller in sysfs, "gone" when it has none.
state() {
	for s in /sys/class/nvme-subsystem/nvme-subsys*; do
		[ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
		for c in "$s"/nvme[0-9]*; do
			[ -f "$c/state" ] && { cat "$c/state"; return; }
		done
	done
	echo gone
}
# dev: the controller's namespace block device.
dev() {
	for s in /sys/class/nvme-subsystem/nvme-subsys*; do
		[ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
		for n in "$s"/nvme*n*; do
			case "${n##*/}" in *c*) continue ;; esac
			[ -b "/dev/${n##*/}" ] && echo "/dev/${n##*/}" && return
		done
	done
}
i=0
while { [ "$(state)" != live ] || [ -z "$(dev)" ]; } && [ $i -lt 100 ]; do sleep 0.2; i=$((i + 1)); done
echo "connected-state=$(state)"
# One write tells the host test the guest is connected and ready: it then
# removes this host from the subsystem. The controller must leave the live
# state, then (ctrl-loss-tmo 3 s, or at once when the kernel honours the
# refused reconnect's DNR) go away.
dd if=/dev/zero of="$(dev)" bs=4096 count=1 oflag=direct 2>/dev/null
echo "ready-write=$?"
i=0
while [ "$(state)" = live ] && [ $i -lt 900 ]; do sleep 0.2; i=$((i + 1)); done
echo "revoked-state=$(state)"
i=0
while [ "$(state)" != gone ] && [ $i -lt 300 ]; do sleep 0.2; i=$((i + 1)); done
echo "final-state=$(state)"
out="$(nvme connect -t tcp -a $A -s $S -n $NQN 2>&1)"
rc=$?
echo "$out" | tail -n 1
echo "reconnect=$rc"
echo "reconnect-state=$(state)"
`

// A host connected through the Linux kernel's initiator (found through a
// discovery listener on its own port) is removed from the subsystem while
// connected: the RPC answers once its queues are gone, the controller list
// is empty, the guest's controller leaves the live state and goes away, and
// its next connect is refused.
func TestRevokedHostLosesItsKernelController(t *testing.T) {
	t.Parallel() // shares nothing with the other tests: see the package comment
	dp := framework.StartDataplane(t)
	port := framework.FreeLoopbackPort(t)
	dport := framework.FreeLoopbackPort(t)
	hostNQN := framework.GuestHostNQN(t)

	dp.Call(t, "bdev_malloc_create", map[string]any{"name": "Malloc0", "num_blocks": 4096, "block_size": 4096}, nil)
	dp.Call(t, "nvmf_create_transport", map[string]any{"trtype": "TCP"}, nil)
	dp.Call(t, "nvmf_create_subsystem", map[string]any{"nqn": mallocNQN, "serial_number": "RCREVOKE"}, nil)
	dp.Call(t, "nvmf_subsystem_add_ns", map[string]any{"nqn": mallocNQN, "namespace": map[string]any{"bdev_name": "Malloc0"}}, nil)
	dp.Call(t, "nvmf_subsystem_add_host", map[string]any{"nqn": mallocNQN, "host": hostNQN}, nil)
	dp.Call(t, "nvmf_subsystem_add_listener", listenerParams(mallocNQN, port), nil)
	disc := map[string]any{
		"nqn": "discovery",
		"listen_address": map[string]any{
			"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": fmt.Sprint(dport),
		},
		"rackcache_advertised": map[string]any{
			"traddr": guestTargetAddr, "trsvcid": fmt.Sprint(guestDiscoveryPort),
		},
	}
	dp.Call(t, "nvmf_subsystem_add_listener", disc, nil)

	// Revoke the host once the guest has written through its controller
	// (its sign that it saw the controller live).
	type controller struct {
		Cntlid      int    `json:"cntlid"`
		Hostnqn     string `json:"hostnqn"`
		NumIOQpairs int    `json:"num_io_qpairs"`
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	revoked := make(chan string, 1)
	go func() {
		report := func(format string, args ...any) { revoked <- fmt.Sprintf(format, args...) }
		for {
			var list []controller
			if err := dp.Client.Call(ctx, "nvmf_subsystem_get_controllers", map[string]any{"nqn": mallocNQN}, &list); err != nil {
				report("nvmf_subsystem_get_controllers: %v", err)
				return
			}
			writes, err := bdevWrites(ctx, dp, "Malloc0")
			if err != nil {
				report("%v", err)
				return
			}
			if len(list) == 1 && list[0].Hostnqn == hostNQN && list[0].NumIOQpairs > 0 && writes > 0 {
				break
			}
			select {
			case <-ctx.Done():
				report("the guest never wrote through its controller")
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		if err := dp.Client.Call(ctx, "nvmf_subsystem_remove_host", map[string]any{"nqn": mallocNQN, "host": hostNQN}, nil); err != nil {
			report("nvmf_subsystem_remove_host: %v", err)
			return
		}
		var after []controller
		if err := dp.Client.Call(ctx, "nvmf_subsystem_get_controllers", map[string]any{"nqn": mallocNQN}, &after); err != nil {
			report("nvmf_subsystem_get_controllers after removal: %v", err)
			return
		}
		report("controllers after removal: %d", len(after))
	}()

	job := fmt.Sprintf(revocationJob, guestTargetAddr, guestDiscoveryPort, guestTargetPort, mallocNQN)
	res := framework.RunGuest(t, framework.GuestOptions{
		Script:        job,
		GuestForwards: map[int]int{guestTargetPort: port, guestDiscoveryPort: dport},
		Timeout:       6 * time.Minute,
	})
	cancel()
	if got := <-revoked; got != "controllers after removal: 0" {
		t.Errorf("revocation: %s", got)
	}
	if res.ExitCode != 0 {
		t.Fatalf("guest job exited with status %d", res.ExitCode)
	}

	discover, _, ok := strings.Cut(res.Output, "--- end discover")
	if !ok {
		t.Fatalf("no discovery output")
	}
	if !regexp.MustCompile(`(?m)^subnqn:\s+` + regexp.QuoteMeta(mallocNQN) + `\s*$`).MatchString(discover) {
		t.Errorf("discovery through port %d does not list %s:\n%s", guestDiscoveryPort, mallocNQN, discover)
	}
	vals := framework.GuestValues(t, res.Output)
	for key, want := range map[string]string{
		"discover-status": "0",
		"connect-all":     "0",
		"connected-state": "live",
		"ready-write":     "0",
		"final-state":     "gone",
		"reconnect-state": "gone",
	} {
		if got := vals[key]; got != want {
			t.Errorf("guest %s = %q, want %q", key, got, want)
		}
	}
	if got := vals["revoked-state"]; got == "live" || got == "" {
		t.Errorf("guest controller state after revocation = %q, want it no longer live", got)
	}
	if got := vals["reconnect"]; got == "0" || got == "" {
		t.Errorf("the revoked host connected again (nvme connect exited %q)", got)
	}
}
