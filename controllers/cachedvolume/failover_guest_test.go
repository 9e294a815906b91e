package cachedvolume

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// The guest writes the volume's first failoverSpan blocks of 64 KiB over
// and over, block by block, from the host-made data: the last pass's data
// is what every read must return, so a server that served a stale cache
// after failing back would show.
const failoverSpan = 96

// failoverJob: connect both paths (native multipath joins them under one
// namespace head), then write N blocks of the host-made data through the
// head with O_DIRECT (block i at i mod SPAN), timing each write
// (/proc/uptime, 10 ms steps). Every EVERY blocks (from block 32) it waits
// until both paths are live and asks the host, in the background, to take
// the owner away (K times in all); the writes go on, queued by the kernel
// through each failover. At the end it reads the span back through the
// head and compares it with the last pass's data.
const failoverJob = `set -u
A=10.0.3.100; SA=%[1]d; SB=%[2]d; NQN=%[3]s; N=%[4]d; SPAN=%[5]d; K=%[6]d; EVERY=%[7]d
for s in $SA $SB; do
	nvme connect -t tcp -a $A -s $s -n $NQN --ctrl-loss-tmo=600 --reconnect-delay=1
	echo "connect-$s=$?"
done
# live PORT: the state of the controller of the path through PORT.
live() {
	for c in "$(subsys)"/nvme[0-9]*; do
		grep -q "trsvcid=$1" "$c/address" 2>/dev/null && cat "$c/state" && return
	done
	echo none
}
i=0
while { [ -z "$(headdev)" ] || [ "$(ana $SB)" = none ]; } && [ $i -lt 150 ]; do sleep 0.2; i=$((i + 1)); done
DEV="$(headdev)"
echo "ana-a-before=$(ana $SA)"
echo "ana-b-before=$(ana $SB)"
errors=0; i=0; c=0; SPID=""; steps=0
: > /tmp/gaps
prev=$(cut -d' ' -f1 /proc/uptime)
while [ $i -lt $N ]; do
	dd if=/job/data of="$DEV" bs=65536 skip=$i seek=$((i %% SPAN)) count=1 oflag=direct 2>/dev/null || errors=$((errors + 1))
	now=$(cut -d' ' -f1 /proc/uptime)
	echo "$c $prev $now" >> /tmp/gaps
	prev=$now
	i=$((i + 1))
	if [ $c -lt $K ] && [ $((i %% EVERY)) -eq $((32 %% EVERY)) ]; then
		if [ -n "$SPID" ]; then wait $SPID && steps=$((steps + 1)); fi
		# The next loss only once the host has both paths again.
		w=0
		while { [ "$(live $SA)" != live ] || [ "$(live $SB)" != live ]; } && [ $w -lt 600 ]; do sleep 0.2; w=$((w + 1)); done
		c=$((c + 1))
		step lose-owner > /tmp/step.out 2>&1 &
		SPID=$!
		prev=$(cut -d' ' -f1 /proc/uptime)
	fi
done
if [ -n "$SPID" ]; then wait $SPID && steps=$((steps + 1)); fi
echo "steps=$steps"
echo "write-errors=$errors"
# The longest write of each cycle: its I/O pause.
awk '{d = ($3 - $2) * 1000; if (d > m[$1]) m[$1] = d} END {for (c in m) if (c > 0) printf "pause-%%d=%%d\n", c, m[c]}' /tmp/gaps
dd if="$DEV" of=/tmp/back bs=65536 count=$SPAN iflag=direct 2>/dev/null
echo "read-back=$?"
dd if=/job/data bs=65536 skip=$((N - SPAN)) count=$SPAN 2>/dev/null | cmp -s - /tmp/back && echo "read-back-data=same" || echo "read-back-data=differs"
nvme disconnect -n $NQN >/dev/null
echo "disconnect=$?"
`

// TestKernelMultipathRidesThroughAFailover: the Linux host's native
// multipath connected to a write-through volume's owner and mirror (two
// real dataplanes, real Ceph, Reconcile passes on the real clock, the
// lease renewer running) writes block by block while the owner is lost:
//
//   - killed with kill -9, then started again: it comes back as the
//     mirror (its stale cache of the volume discarded) and the next loss
//     fails back to it. Two cycles here; `make soak` runs
//     RACKCACHE_FAILOVER_CYCLES (20) and reports the pauses;
//   - cut off from the operator but not from the host (split brain: the
//     operator's calls to it fail, the host's path to it stays up). Its
//     lease runs out, so it fences itself and acknowledges nothing more.
//
// The operator fences the owner and promotes the mirror after the
// failover grace and the owner's lease. The application sees no I/O
// error, what it wrote last is read back through the host, and Ceph's own
// copy of the image (rbd export) holds it. A crash of the guest kernel's
// initiator on the target's death (a known race of the stock kernel)
// starts the scenario over on a fresh guest.
func TestKernelMultipathRidesThroughAFailover(t *testing.T) {
	cycles := 2
	if v := os.Getenv("RACKCACHE_FAILOVER_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("RACKCACHE_FAILOVER_CYCLES=%q: want a positive count", v)
		}
		cycles = n
	}
	for _, sc := range []failoverScenario{
		{name: "kill -9", cycles: cycles},
		// A fenced server's Ceph client stays blocklisted: it cannot
		// come back as a mirror without a restart (docs/operator.md).
		{name: "partition", partition: true, cycles: 1},
		// Write-back: the owner's cache device is lost with it; only the
		// mirror holds the acknowledged writes. (No comma in a subtest's
		// name: it goes into t.TempDir, and Ceph reads a comma in the
		// keyring path as a list of paths.)
		{name: "write-back kill -9 and cache device lost", writeBack: true, cycles: cycles},
	} {
		t.Run(sc.name, func(t *testing.T) {
			for attempt := 1; attempt <= framework.InitiatorCrashAttempts; attempt++ {
				if !failoverAttempt(t, attempt, sc) {
					return
				}
				t.Logf("attempt %d: the guest kernel's initiator crashed on the owner's loss; starting over", attempt)
			}
			t.Fatalf("the guest kernel's initiator crashed in all %d attempts", framework.InitiatorCrashAttempts)
		})
	}
}

// failoverScenario is how the owner is lost, how often, and the volume's
// write mode.
type failoverScenario struct {
	name      string
	partition bool
	writeBack bool
	cycles    int
}

// failoverAttempt runs the scenario once; true when the guest's initiator
// crashed (the caller starts over).
func failoverAttempt(t *testing.T, attempt int, sc failoverScenario) bool {
	partition, cycles := sc.partition, sc.cycles
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	vol := fmt.Sprintf("ha-guest-%d", attempt)
	h := newHARig(t, ctx, vol, rcv1.HostAuthenticationNone, framework.GuestHostNQN(t))
	if sc.writeBack {
		v, err := h.volume(ctx, vol)
		if err != nil {
			t.Fatal(err)
		}
		v.Spec.WriteMode = rcv1.WriteBack
		if err := h.g.c.Update(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	h.g.r.Now = time.Now // passes on the real clock, as the grace runs
	renewer := &leases.Renewer{Client: h.g.c, Dial: h.g.r.Dial, Duration: func(*rcv1.CachePool) time.Duration { return 2 * time.Second }}
	h.g.r.Leases = renewer
	renewing, stopRenewing := context.WithCancel(ctx)
	defer stopRenewing()
	go func() { _ = renewer.Start(renewing) }()
	st := h.serve(ctx, t, vol)
	nqn := SubsystemNQN(vol)
	waitLease(ctx, t, h.dps[st.Server].Client)
	waitLease(ctx, t, h.dps[st.Mirror].Client)

	const every = 24
	passes := max(2, (32+cycles*every+failoverSpan-1)/failoverSpan)
	blocks := passes * failoverSpan
	dir := t.TempDir()
	data := make([]byte, blocks<<16)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	dataPath := filepath.Join(dir, "data")
	if err := os.WriteFile(dataPath, data, 0o644); err != nil {
		t.Fatal(err)
	}

	var promoted []time.Duration
	var ownerWrites uint64
	res := framework.RunGuestWithSteps(t, framework.GuestOptions{
		Script: framework.GuestStepFunctions + framework.GuestMultipathFunctions +
			fmt.Sprintf(failoverJob, guestPathA, guestPathB, nqn, blocks, failoverSpan, cycles, every),
		GuestForwardsTo: map[int]string{
			guestPathA: h.addrs[st.Server] + ":" + strconv.Itoa(h.port),
			guestPathB: h.addrs[st.Mirror] + ":" + strconv.Itoa(h.port),
		},
		Files:               map[string]string{dataPath: "/job/data"},
		Timeout:             time.Duration(8+cycles) * time.Minute,
		ReturnInitiatorOops: true,
	}, func(step string) error {
		if step != "lose-owner" {
			return fmt.Errorf("unknown step %s", step)
		}
		cur, err := h.volume(ctx, vol)
		if err != nil {
			return err
		}
		owner, mirror := cur.Status.Server, cur.Status.Mirror
		lost := time.Now()
		if partition {
			// Cut off from the operator (JSON-RPC and portal), not from
			// the host.
			h.rpcCut[owner], h.dataCut[owner] = true, true
		} else {
			h.dps[owner].Kill(t)
		}
		if sc.writeBack {
			// The owner's cache device goes with it: a blank one replaces it.
			if err := os.Remove(h.files[owner]); err != nil {
				return err
			}
			if err := os.WriteFile(h.files[owner], nil, 0o600); err != nil {
				return err
			}
			if err := os.Truncate(h.files[owner], 128<<20); err != nil {
				return err
			}
		}
		if err := h.passUntil(vol, "mirror "+mirror+" promoted", func(v *rcv1.CachedVolume) bool {
			return v.Status.Server == mirror && len(v.Status.Paths) > 0 && v.Status.Paths[0].ANAState == string(dataplane.ANAOptimized)
		}); err != nil {
			return err
		}
		promoted = append(promoted, time.Since(lost))
		if partition {
			return ownerFenced(ctx, h.dps[owner].Client, nqn, &ownerWrites)
		}
		// The killed server starts again on its cache device, which still
		// holds the volume's stale cache (write-through) or is blank
		// (write-back), and becomes the mirror (for write-back, once the
		// owner reports it in sync).
		h.dps[owner] = startServer(t, h.files[owner], h.cluster)
		if err := h.passUntil(vol, owner+" back as the mirror", func(v *rcv1.CachedVolume) bool {
			return v.Status.Mirror == owner && meta.IsStatusConditionTrue(v.Status.Conditions, rcv1.ConditionMirrored)
		}); err != nil {
			return err
		}
		if !sc.writeBack {
			h.g.event("StaleCacheDiscarded")
		}
		return nil
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
		"steps":                               strconv.Itoa(cycles),
		"write-errors":                        "0",
		"read-back":                           "0",
		"read-back-data":                      "same",
		"disconnect":                          "0",
	} {
		if got := vals[key]; got != want {
			t.Errorf("guest %s = %q, want %q", key, got, want)
		}
	}
	var pauses []int
	for c := 1; c <= cycles; c++ {
		ms, err := strconv.Atoi(vals[fmt.Sprintf("pause-%d", c)])
		if err != nil {
			t.Errorf("guest pause-%d = %q", c, vals[fmt.Sprintf("pause-%d", c)])
			continue
		}
		pauses = append(pauses, ms)
	}
	slices.Sort(pauses)
	if len(pauses) > 0 {
		t.Logf("%d losses (%s), promoted after %v; I/O pause per loss (the longest write, ms): min %d, median %d, max %d, all %v",
			cycles, sc.name, promoted, pauses[0], pauses[len(pauses)/2], pauses[len(pauses)-1], pauses)
	}
	if partition {
		// The cut-off owner acknowledged nothing after the promotion.
		owner := ""
		for n := range h.dataCut {
			owner = n
		}
		st, err := h.dps[owner].Client.CachedBdevStats(ctx, CachedBdevName(vol))
		if err != nil || st.Blocks.HostWrite != ownerWrites {
			t.Errorf("the fenced owner's written bytes went from %d at the promotion to %+v (%v)", ownerWrites, st, err)
		}
	}

	if sc.writeBack {
		// The last owner writes back what it holds dirty.
		cur, err := h.volume(ctx, vol)
		if err != nil {
			t.Fatal(err)
		}
		flushed(ctx, t, h.dps[cur.Status.Server].Client, CachedBdevName(vol))
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
	last := data[(blocks-failoverSpan)<<16:]
	if len(got) < len(last) || !bytes.Equal(got[:len(last)], last) {
		t.Errorf("Ceph's copy of the image does not hold the guest's last writes")
	}
	return false
}

// volume reads the CachedVolume.
func (h *haRig) volume(ctx context.Context, name string) (*rcv1.CachedVolume, error) {
	v := &rcv1.CachedVolume{}
	return v, h.g.c.Get(ctx, client.ObjectKey{Name: name}, v)
}

// passUntil runs Reconcile passes, as the operator's requeues would, until
// cond holds (2 minutes at most).
func (h *haRig) passUntil(vol, what string, cond func(*rcv1.CachedVolume) bool) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if got, _, _ := h.g.pass(vol); got != nil && cond(got) {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("%s: not within 2 minutes", what)
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
