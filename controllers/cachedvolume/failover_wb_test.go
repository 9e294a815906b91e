package cachedvolume

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/test/framework"
)

// stampedLBAs is how many 4 KiB blocks the write-back failover test
// writes: 2 MiB, all of it dirty (cleaning Nop) in a 16 MiB cache.
const stampedLBAs = 512

// TestReconcilerMirrorsWriteBackAndPromotes runs Reconcile passes against
// a real apiserver, two real dataplanes and real Ceph: a write-back volume
// of a two-server pool gets an owner that forwards its writes to a mirror
// (a replication subsystem on the mirror, the owner's server host NQN
// logging in with DH-HMAC-CHAP); Mirrored turns True once the owner
// reports the mirror in sync. Stamped blocks written through the owner
// stay dirty (cleaning Nop: Ceph has none of them), then the owner is
// killed with kill -9 and its cache device deleted. The mirror is
// promoted: it writes back what it holds, and Ceph's own copy of the
// image (rbd export) holds every acknowledged block.
func TestReconcilerMirrorsWriteBackAndPromotes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	h := newHARig(t, ctx, "wbha", rcv1.HostAuthenticationNone, loadgenHostNQN)
	g := h.g
	vol := &rcv1.CachedVolume{}
	if err := g.c.Get(ctx, client.ObjectKey{Name: "wbha"}, vol); err != nil {
		t.Fatal(err)
	}
	vol.Spec.WriteMode = rcv1.WriteBack
	vol.Spec.Policies.Cleaning = &rcv1.Cleaning{Policy: rcv1.CleaningNop}
	if err := g.c.Update(ctx, vol); err != nil {
		t.Fatal(err)
	}
	mirrored := func(v *rcv1.CachedVolume) bool {
		return condition(v, rcv1.ConditionMirrored).Status == metav1.ConditionTrue
	}
	if err := h.passUntil("wbha", "mirrored", mirrored); err != nil {
		t.Fatal(err)
	}
	got, _ := h.volume(ctx, "wbha")
	st := got.Status
	owner, mirror := st.Server, st.Mirror
	if owner == "" || mirror == "" || owner == mirror || st.WriteMode != rcv1.WriteBack || len(st.Paths) != 2 {
		t.Fatalf("write-back volume served: %+v", st)
	}
	oc, mc := h.dps[owner].Client, h.dps[mirror].Client
	name := CachedBdevName("wbha")
	os0, err := oc.CachedBdevStats(ctx, name)
	if err != nil || os0.Role != dataplane.RoleOwner || os0.Epoch == nil || *os0.Epoch != 1 || os0.Held ||
		os0.Replica == nil || os0.Replica.State != dataplane.ReplicaInSync ||
		os0.Replica.Target != ReplicaNQN("wbha")+"@"+net.JoinHostPort(h.addrs[mirror], strconv.Itoa(h.port)) {
		t.Fatalf("owner's stats: %+v (replica %+v), %v", os0, os0.Replica, err)
	}
	ms0, err := mc.CachedBdevStats(ctx, name)
	if err != nil || ms0.Role != dataplane.RoleMirror || ms0.Epoch == nil || *ms0.Epoch != 1 {
		t.Fatalf("mirror's stats: %+v, %v", ms0, err)
	}
	// The replication subsystem lets the owner's server in, no one else,
	// and only with the keys of the volume's replication Secret.
	rs, err := lookupSubsystem(ctx, mc, ReplicaNQN("wbha"))
	if err != nil || rs == nil || len(rs.Hosts) != 1 || rs.Hosts[0].NQN != ServerHostNQN(owner) ||
		rs.Hosts[0].Host == "" || rs.Hosts[0].Ctrlr == "" || rs.AllowAnyHost {
		t.Fatalf("replication subsystem on the mirror: %+v, %v", rs, err)
	}
	if err := runLoadAt(t, h.addrs[mirror], h.port, ReplicaNQN("wbha")); err == nil {
		t.Fatal("a host without the replication keys wrote to the mirror's copy")
	}
	// A second pass changes nothing.
	if again, _, err := g.pass("wbha"); err != nil || again.Status.Server != owner || again.Status.Mirror != mirror ||
		condition(again, rcv1.ConditionMirrored).Status != metav1.ConditionTrue {
		t.Fatalf("second pass: %v, %+v", err, again.Status)
	}

	// A snapshot's write-through hold: the owner stops forwarding and its
	// mirror's copy goes stale. Mirrored False is stored before the owner
	// leaves write-back, never after (a promotion counts on a True).
	got, _ = h.volume(ctx, "wbha")
	if got.Annotations == nil {
		got.Annotations = map[string]string{}
	}
	got.Annotations[rcv1.WriteThroughHoldAnnotation] = HoldValue("snap-1", time.Now().Add(time.Minute))
	if err := g.c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	got, _, err = g.pass("wbha")
	if c := condition(got, rcv1.ConditionMirrored); err != nil || c.Status != metav1.ConditionFalse || c.Reason != rcv1.ReasonLeavingWriteBack {
		t.Fatalf("the hold's first pass: %v, Mirrored %+v", err, c)
	}
	if os, err := oc.CachedBdevStats(ctx, name); err != nil || os.WriteMode != dataplane.WriteBack || os.Replica == nil {
		t.Fatalf("the owner left write-back on the pass that stored Mirrored False: %+v, %v", os, err)
	}
	if err := h.passUntil("wbha", "write-through under the hold", func(v *rcv1.CachedVolume) bool {
		return v.Status.WriteThroughHold == "snap-1"
	}); err != nil {
		t.Fatal(err)
	}
	// The hold stays in force: later passes (the mirror connected anew,
	// Mirrored True again) never take the owner back to write-back.
	for i := 0; i < 3; i++ {
		got, _, err = g.pass("wbha")
		os, serr := oc.CachedBdevStats(ctx, name)
		if err != nil || serr != nil || got.Status.WriteThroughHold != "snap-1" || os.WriteMode != dataplane.WriteThrough {
			t.Fatalf("pass %d under the hold: %v, %v, hold %q, owner's mode %q", i, err, serr, got.Status.WriteThroughHold, os.WriteMode)
		}
	}
	got, _ = h.volume(ctx, "wbha")
	delete(got.Annotations, rcv1.WriteThroughHoldAnnotation)
	if err := g.c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := h.passUntil("wbha", "write-back and mirrored after the hold", func(v *rcv1.CachedVolume) bool {
		return mirrored(v) && v.Status.WriteThroughHold == "" && v.Status.WriteMode == rcv1.WriteBack
	}); err != nil {
		t.Fatal(err)
	}

	// The mirror is lost (kill -9): the owner holds the answers of the
	// writes it cannot mirror until a pass that finds Mirrored False
	// stored tells it to go on alone.
	h.dps[mirror].Kill(t)
	held := make(chan []uint64, 1)
	go func() { held <- writeStamped(t, h.addrs[owner], h.port, SubsystemNQN("wbha"), 1024) }()
	time.Sleep(2 * time.Second)
	select {
	case <-held:
		t.Fatal("writes were answered while the owner could not mirror them and was not told to go on alone")
	default:
	}
	if got, _, _ = g.pass("wbha"); condition(got, rcv1.ConditionMirrored).Reason != rcv1.ReasonMirrorLost {
		t.Fatalf("mirror lost: %+v", condition(got, rcv1.ConditionMirrored))
	}
	// Mirrored False is stored now; until this pass stored it, a promotion
	// could still have counted on the mirror, so nothing was released.
	select {
	case <-held:
		t.Fatal("writes were answered on the pass that stored Mirrored False")
	case <-time.After(time.Second):
	}
	if _, _, err := g.pass("wbha"); err != nil {
		t.Fatalf("the pass after the mirror's loss: %v", err)
	}
	g.event("MirrorDetached")
	lbasHeld := <-held
	// It comes back without its configuration: its copy missed writes, so
	// it is made anew, and the owner writes back what the mirror lacks
	// before the volume counts as mirrored again.
	h.dps[mirror] = startServer(t, h.files[mirror], h.cluster)
	mc = h.dps[mirror].Client
	if err := h.passUntil("wbha", "mirrored again", mirrored); err != nil {
		t.Fatal(err)
	}
	if n := stampedInCeph(ctx, t, h, lbasHeld); n != len(lbasHeld) {
		t.Fatalf("Ceph holds %d of the %d blocks written while the mirror was lost, after the new mirror's sync", n, len(lbasHeld))
	}
	if ms, err := mc.CachedBdevStats(ctx, name); err != nil || ms.DirtyBytes != 0 || ms.Role != dataplane.RoleMirror {
		t.Fatalf("the new mirror's copy: %+v, %v; want empty", ms, err)
	}

	// The owner restarts (kill -9, its cache device kept): its mirror
	// connection is gone, so it serves nothing until Mirrored False is
	// stored and the mirror is connected anew.
	h.dps[owner].Kill(t)
	h.dps[owner] = startServer(t, h.files[owner], h.cluster)
	oc = h.dps[owner].Client
	if got, _, _ = g.pass("wbha"); condition(got, rcv1.ConditionMirrored).Reason != rcv1.ReasonMirrorLost || got.Status.Server != owner {
		t.Fatalf("owner restarted: %+v, %+v", got.Status, condition(got, rcv1.ConditionMirrored))
	}
	wantANA(ctx, t, oc, SubsystemNQN("wbha"), dataplane.ANAInaccessible)
	if err := h.passUntil("wbha", "mirrored after the owner's restart", mirrored); err != nil {
		t.Fatal(err)
	}
	wantANA(ctx, t, oc, SubsystemNQN("wbha"), dataplane.ANAOptimized)

	lbas := writeStamped(t, h.addrs[owner], h.port, SubsystemNQN("wbha"), 0)
	os1, err1 := oc.CachedBdevStats(ctx, name)
	ms1, err2 := mc.CachedBdevStats(ctx, name)
	if err1 != nil || err2 != nil || os1.DirtyBytes < stampedLBAs*4096 || ms1.DirtyBytes < os1.DirtyBytes ||
		os1.Replica == nil || os1.Replica.WriteBytes < stampedLBAs*4096 {
		t.Fatalf("after the writes: owner dirty %d (replica %+v, %v), mirror dirty %d (%v); want both >= %d",
			os1.DirtyBytes, os1.Replica, err1, ms1.DirtyBytes, err2, stampedLBAs*4096)
	}
	if n := stampedInCeph(ctx, t, h, lbas); n != 0 {
		t.Fatalf("%d stamped blocks reached Ceph before any write-back", n)
	}

	// kill -9 the owner and lose its cache device: only the mirror has
	// the acknowledged writes.
	h.dps[owner].Kill(t)
	if err := os.Remove(h.files[owner]); err != nil {
		t.Fatal(err)
	}
	if got, _, _ = g.pass("wbha"); got.Status.Server != owner {
		t.Fatalf("within the grace: %+v", got.Status)
	}
	g.now = g.now.Add(3 * time.Second)
	got, _, err = g.pass("wbha")
	if err != nil {
		t.Fatalf("promoting pass: %v", err)
	}
	st = got.Status
	if st.Server != mirror || st.Epoch != 2 || len(st.FormerServers) != 1 || st.FormerServers[0] != owner ||
		condition(got, rcv1.ConditionPlaced).Reason != rcv1.ReasonPromoted {
		t.Fatalf("after the promotion: %+v\nconditions %+v", st, st.Conditions)
	}
	if rs, err := lookupSubsystem(ctx, mc, ReplicaNQN("wbha")); err != nil || rs != nil {
		t.Errorf("the promoted owner still exports the replication subsystem: %+v, %v", rs, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ps, err := mc.CachedBdevStats(ctx, name)
		if err != nil || ps.Role != dataplane.RoleOwner || ps.Epoch == nil || *ps.Epoch != 2 {
			t.Fatalf("promoted owner's stats: %+v, %v", ps, err)
		}
		if ps.DirtyBytes == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the promoted owner still has %d dirty bytes after a minute", ps.DirtyBytes)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := stampedInCeph(ctx, t, h, lbas); n != len(lbas) {
		t.Fatalf("Ceph holds %d of the %d acknowledged blocks after the promotion", n, len(lbas))
	}
}

// writeStamped writes stampedLBAs blocks in random order through the
// NVMe/TCP portal from LBA first on (rackcache-loadgen replay --verify:
// each block stamped with its LBA and generation 1), reads them back and
// checks them; it returns the LBAs.
func writeStamped(t *testing.T, addr string, port int, nqn string, first uint64) []uint64 {
	t.Helper()
	bin := filepath.Join(filepath.Dir(framework.DataplaneBinary(t)), "rackcache-loadgen")
	lbas := make([]uint64, stampedLBAs)
	for i := range lbas {
		lbas[i] = first + uint64(i)
	}
	rand.Shuffle(len(lbas), func(i, j int) { lbas[i], lbas[j] = lbas[j], lbas[i] })
	// An MSR Cambridge trace: the writes, then the reads.
	var trace strings.Builder
	ts := int64(128166385295514663)
	for _, op := range []string{"Write", "Read"} {
		for _, lba := range lbas {
			ts += 1000
			fmt.Fprintf(&trace, "%d,hm,0,%s,%d,4096,100\n", ts, op, lba*4096)
		}
	}
	path := filepath.Join(t.TempDir(), "stamped.csv")
	if err := os.WriteFile(path, []byte(trace.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "replay", "--addr", net.JoinHostPort(addr, strconv.Itoa(port)), "--nqn", nqn,
		"--trace", path, "--speedup", "0", "--qd", "8", "--verify").CombinedOutput()
	t.Logf("replay: %v\n%s", err, out)
	if err != nil || !strings.Contains(string(out), "verif") {
		t.Errorf("stamped writes through %s: %v", addr, err)
	}
	return lbas
}

// stampedInCeph counts the blocks of lbas that Ceph's own copy of the
// rig's image holds with their stamp (rbd export).
func stampedInCeph(ctx context.Context, t *testing.T, h *haRig, lbas []uint64) int {
	t.Helper()
	file := filepath.Join(t.TempDir(), "image")
	if out, err := h.cluster.Admin(ctx, "rbd", "export", h.cluster.Pool+"/"+h.image, file); err != nil {
		t.Fatalf("rbd export: %v\n%s", err, out)
	}
	img, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, lba := range lbas {
		b := img[lba*4096 : (lba+1)*4096]
		if bytes.Equal(b[:8], []byte("rcreplay")) && binary.LittleEndian.Uint64(b[8:16]) == lba && binary.LittleEndian.Uint32(b[16:20]) == 1 {
			n++
		}
	}
	return n
}

// flushed writes the cached bdev's dirty data back to Ceph and waits until
// none is left (a minute at most).
func flushed(ctx context.Context, t *testing.T, c *dataplane.Client, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := startOrPollFlush(ctx, c, name)
		if err != nil {
			t.Fatalf("flush %s: %v", name, err)
		}
		if !st.InProgress && st.DirtyBytes == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still has %d dirty bytes after a minute of flushing", name, st.DirtyBytes)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
