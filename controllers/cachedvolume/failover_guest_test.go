package cachedvolume

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/controllers/leases"
	"github.com/rackcache/rackcache/test/framework"
)

// The guest reaches the owner and the mirror at 10.0.3.100 on these ports
// (guestfwd to each server's own loopback address and the pool's port).
const (
	guestPathA = 4420
	guestPathB = 4421
)

// failoverBlocks are the 64 KiB blocks the guest writes, one at a time.
const failoverBlocks = 192

// failoverJob: connect both paths (native multipath joins them under one
// namespace head), then write the host-made data block by block through
// the head with O_DIRECT, timing each write (/proc/uptime, 10 ms steps).
// After 32 blocks it asks the host, in the background, to kill -9 the
// owner; the writes go on (queued by the kernel through the failover).
// At the end it reads everything back through the head.
const failoverJob = `set -u
A=10.0.3.100; SA=%[1]d; SB=%[2]d; NQN=%[3]s; N=%[4]d
for s in $SA $SB; do
	nvme connect -t tcp -a $A -s $s -n $NQN --ctrl-loss-tmo=600 --reconnect-delay=1
	echo "connect-$s=$?"
done
i=0
while { [ -z "$(headdev)" ] || [ "$(ana $SB)" = none ]; } && [ $i -lt 150 ]; do sleep 0.2; i=$((i + 1)); done
DEV="$(headdev)"
echo "ana-a-before=$(ana $SA)"
echo "ana-b-before=$(ana $SB)"
errors=0; i=0; SPID=""
prev=$(cut -d' ' -f1 /proc/uptime)
while [ $i -lt $N ]; do
	dd if=/job/data of="$DEV" bs=65536 skip=$i seek=$i count=1 oflag=direct 2>/dev/null || errors=$((errors + 1))
	now=$(cut -d' ' -f1 /proc/uptime)
	echo "$prev $now" >> /tmp/gaps
	prev=$now
	i=$((i + 1))
	if [ $i -eq 32 ]; then step kill-owner > /tmp/step.out 2>&1 & SPID=$!; fi
done
wait $SPID
echo "step=$?"
echo "write-errors=$errors"
echo "max-write-ms=$(awk '{d = ($2 - $1) * 1000; if (d > m) m = d} END {printf "%%d", m}' /tmp/gaps)"
echo "ana-b-after=$(ana $SB)"
dd if="$DEV" of=/tmp/back bs=65536 count=$N iflag=direct 2>/dev/null
echo "read-back=$?"
head -c $((N * 65536)) /job/data | cmp -s - /tmp/back && echo "read-back-data=same" || echo "read-back-data=differs"
nvme disconnect -n $NQN >/dev/null
echo "disconnect=$?"
`

// TestKernelMultipathRidesThroughAFailover: the Linux host's native
// multipath connected to a write-through volume's owner and mirror (two
// real dataplanes, real Ceph, Reconcile passes on the real clock, the
// lease renewer running) writes block by block while the owner is lost:
//
//   - killed with kill -9;
//   - cut off from the operator but not from the host (split brain: the
//     operator's calls to it fail, the host's path to it stays up). Its
//     lease runs out, so it fences itself and acknowledges nothing more.
//
// The operator fences the owner and promotes the mirror after the
// failover grace and the owner's lease. The application sees no I/O
// error, every write it made is read back through the host, and Ceph's own
// copy of the image (rbd export) holds it. The longest write, the I/O
// pause, is logged. A crash of the guest kernel's initiator on the
// target's death (a known race of the stock kernel) starts the scenario
// over on a fresh guest.
func TestKernelMultipathRidesThroughAFailover(t *testing.T) {
	for _, partition := range []bool{false, true} {
		name := map[bool]string{false: "kill -9", true: "partition"}[partition]
		t.Run(name, func(t *testing.T) {
			for attempt := 1; attempt <= framework.InitiatorCrashAttempts; attempt++ {
				if !failoverAttempt(t, attempt, partition) {
					return
				}
				t.Logf("attempt %d: the guest kernel's initiator crashed on the owner's loss; starting over", attempt)
			}
			t.Fatalf("the guest kernel's initiator crashed in all %d attempts", framework.InitiatorCrashAttempts)
		})
	}
}

// failoverAttempt runs the scenario once; true when the guest's
// initiator crashed (the caller starts over).
func failoverAttempt(t *testing.T, attempt int, partition bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	vol := fmt.Sprintf("ha-guest-%d", attempt)
	h := newHARig(t, ctx, vol, rcv1.HostAuthenticationNone, framework.GuestHostNQN(t))
	h.g.r.Now = time.Now // passes on the real clock, as the grace runs
	// The operator's view of each server: a partition makes the owner's
	// calls fail as a dead server's would, its process still serving.
	cutOff := map[string]bool{}
	dial := h.g.r.Dial
	h.g.r.Dial = func(ctx context.Context, pool, node, addr string) (*dataplane.Client, error) {
		if cutOff[node] {
			return dataplane.NewUnixClient(filepath.Join(t.TempDir(), "unreachable.sock")), nil
		}
		return dial(ctx, pool, node, addr)
	}
	renewer := &leases.Renewer{Client: h.g.c, Dial: h.g.r.Dial, Duration: func(*rcv1.CachePool) time.Duration { return 2 * time.Second }}
	h.g.r.Leases = renewer
	renewing, stopRenewing := context.WithCancel(ctx)
	defer stopRenewing()
	go func() { _ = renewer.Start(renewing) }()
	st := h.serve(ctx, t, vol)
	owner, mirror := st.Server, st.Mirror
	nqn := SubsystemNQN(vol)
	waitLease(ctx, t, h.dps[owner].Client)
	waitLease(ctx, t, h.dps[mirror].Client)

	dir := t.TempDir()
	data := make([]byte, failoverBlocks<<16)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	dataPath := filepath.Join(dir, "data")
	if err := os.WriteFile(dataPath, data, 0o644); err != nil {
		t.Fatal(err)
	}

	var promotedAfter time.Duration
	var ownerWrites uint64
	res := framework.RunGuestWithSteps(t, framework.GuestOptions{
		Script: framework.GuestStepFunctions + framework.GuestMultipathFunctions + fmt.Sprintf(failoverJob, guestPathA, guestPathB, nqn, failoverBlocks),
		GuestForwardsTo: map[int]string{
			guestPathA: h.addrs[owner] + ":" + strconv.Itoa(h.port),
			guestPathB: h.addrs[mirror] + ":" + strconv.Itoa(h.port),
		},
		Files:               map[string]string{dataPath: "/job/data"},
		Timeout:             8 * time.Minute,
		ReturnInitiatorOops: true,
	}, func(step string) error {
		if step != "kill-owner" {
			return fmt.Errorf("unknown step %s", step)
		}
		killed := time.Now()
		if partition {
			cutOff[owner] = true
		} else {
			h.dps[owner].Kill(t)
		}
		// Passes as the operator's requeues would run them, until the
		// mirror is the owner.
		for time.Since(killed) < 2*time.Minute {
			got, _, _ := h.g.pass(vol)
			if got.Status.Server == mirror && len(got.Status.Paths) > 0 && got.Status.Paths[0].ANAState == string(dataplane.ANAOptimized) {
				promotedAfter = time.Since(killed)
				if partition {
					return ownerFenced(ctx, h.dps[owner].Client, nqn, &ownerWrites)
				}
				return nil
			}
			time.Sleep(250 * time.Millisecond)
		}
		return fmt.Errorf("mirror %s not promoted within 2 minutes of the owner's loss", mirror)
	})
	if res.InitiatorOops != "" {
		return true
	}
	if res.ExitCode != 0 {
		t.Fatalf("guest job exited with status %d", res.ExitCode)
	}
	vals := framework.GuestValues(t, res.Output)
	for key, want := range map[string]string{
		"connect-" + strconv.Itoa(guestPathA): "0",
		"connect-" + strconv.Itoa(guestPathB): "0",
		"ana-a-before":                        "optimized",
		"ana-b-before":                        "inaccessible",
		"step":                                "0",
		"write-errors":                        "0",
		"ana-b-after":                         "optimized",
		"read-back":                           "0",
		"read-back-data":                      "same",
		"disconnect":                          "0",
	} {
		if got := vals[key]; got != want {
			t.Errorf("guest %s = %q, want %q", key, got, want)
		}
	}
	t.Logf("owner %s lost (partition: %v); mirror %s promoted %v later; the longest write in the guest took %s ms",
		owner, partition, mirror, promotedAfter.Round(time.Millisecond), vals["max-write-ms"])
	if partition {
		// The cut-off owner acknowledged nothing after the promotion.
		st, err := h.dps[owner].Client.CachedBdevStats(ctx, CachedBdevName(vol))
		if err != nil || st.Blocks.HostWrite != ownerWrites {
			t.Errorf("the fenced owner's written bytes went from %d at the promotion to %+v (%v)", ownerWrites, st, err)
		}
	}

	// Ceph's own copy, read with rbd, not through any dataplane.
	export := filepath.Join(dir, "export.img")
	if out, err := h.cluster.Admin(ctx, "rbd", "export", h.cluster.Pool+"/"+h.image, export); err != nil {
		t.Fatalf("rbd export: %v\n%s", err, out)
	}
	got, err := os.ReadFile(export)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < len(data) || !bytes.Equal(got[:len(data)], data) {
		t.Errorf("Ceph's copy of the image does not hold every write the guest made")
	}
	return false
}

// waitLease waits until the renewer has granted the server its lease.
func waitLease(ctx context.Context, t *testing.T, c *dataplane.Client) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.Lease(ctx)
		if err == nil && st.Granted && !st.Fenced {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lease within 30 s: %+v, %v", st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ownerFenced checks, when its mirror was promoted, that the owner cut off
// from the operator has fenced itself (its lease ran out, its path
// reports inaccessible) and keeps the bytes it had written by then.
func ownerFenced(ctx context.Context, c *dataplane.Client, nqn string, writes *uint64) error {
	lease, err := c.Lease(ctx)
	if err != nil || !lease.Fenced {
		return fmt.Errorf("the cut-off owner's lease when its mirror was promoted: %+v, %w; want fenced", lease, err)
	}
	ls, err := c.Listeners(ctx, nqn)
	if err != nil || len(ls) != 1 || len(ls[0].ANAStates) == 0 || ls[0].ANAStates[0].State != dataplane.ANAInaccessible {
		return fmt.Errorf("the cut-off owner's listener: %+v, %w; want inaccessible", ls, err)
	}
	st, err := c.CachedBdevStats(ctx, CachedBdevName(strings.TrimPrefix(nqn, NQNPrefix)))
	if err != nil {
		return err
	}
	*writes = st.Blocks.HostWrite
	return nil
}
