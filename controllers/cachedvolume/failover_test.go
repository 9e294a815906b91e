package cachedvolume

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/ceph"
	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/test/framework"
)

// TestReconcilerMirrorsAndPromotes runs Reconcile passes against a real
// apiserver, two real dataplanes and real Ceph: a write-through volume of
// a two-server pool gets an owner and a mirror exporting one subsystem
// (the owner's path optimized, the mirror's inaccessible, so a host's I/O
// there is refused); the owner is killed with kill -9; after the failover
// grace the mirror is fenced off from it (its Ceph client blocklisted in
// Ceph's own OSD map) and promoted: its path turns optimized, the epoch
// rises, and the old owner is a former server.
// haRig is a two-server pool on real dataplanes and real Ceph, each
// server with its own cache device and its own data address on loopback
// (one NVMe/TCP port, as a pool has), and one write-through volume on it.
type haRig struct {
	g       *reconcilerRig
	cluster *framework.Ceph
	dps     map[string]*framework.Dataplane
	addrs   map[string]string
	// files are the servers' cache devices (a restarted server reopens
	// its own).
	files map[string]string
	// rpcCut and dataCut cut the operator off a server's JSON-RPC and
	// from its NVMe/TCP portal (the host's path to it stays).
	rpcCut, dataCut map[string]bool
	port            int
	image           string
}

func newHARig(t *testing.T, ctx context.Context, vol string, auth rcv1.HostAuthentication, hosts ...string) *haRig {
	h := &haRig{g: newReconcilerRig(t), cluster: framework.StartCeph(t), dps: map[string]*framework.Dataplane{}, files: map[string]string{},
		rpcCut: map[string]bool{}, dataCut: map[string]bool{},
		addrs: map[string]string{"n1": "127.0.0.1", "n2": "127.0.0.2"}, port: framework.FreeLoopbackPort(t), image: "cv-" + vol}
	if out, err := h.cluster.Admin(ctx, "rbd", "create", "--size", "64M", h.cluster.Pool+"/"+h.image); err != nil {
		t.Fatalf("create rbd image: %v\n%s", err, out)
	}
	var cacheFiles []string
	for _, n := range []string{"n1", "n2"} {
		f := filepath.Join(t.TempDir(), "cache0.img")
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(f, 128<<20); err != nil {
			t.Fatal(err)
		}
		cacheFiles = append(cacheFiles, f)
		h.files[n] = f
		h.dps[n] = startServer(t, f, h.cluster)
	}
	// A killed server's client stays: calls to it fail as to any dead
	// one; so do the calls to a server cut off.
	h.g.r.Dial = func(_ context.Context, _, node, _ string) (*dataplane.Client, error) {
		dp, ok := h.dps[node]
		switch {
		case !ok:
			return nil, fmt.Errorf("no server %s in this test", node)
		case h.rpcCut[node]:
			return dataplane.NewUnixClient(filepath.Join(t.TempDir(), "unreachable.sock")), nil
		}
		return dp.Client, nil
	}
	h.g.r.ProbeDataPath = func(ctx context.Context, address string, port int32) bool {
		for n, a := range h.addrs {
			if a == address && h.dataCut[n] {
				return false
			}
		}
		return dataPathAnswers(ctx, address, port)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "ceph-user", Namespace: "default"},
		Data:       map[string][]byte{ceph.UserIDKey: []byte(h.cluster.User), ceph.UserKeyKey: []byte(h.cluster.Key)},
	}
	pool := &rcv1.CachePool{
		ObjectMeta: metav1.ObjectMeta{Name: "fast"},
		Spec: rcv1.CachePoolSpec{
			NodeSelector:  map[string]string{"rackcache.io/cache-server": "true"},
			Devices:       []rcv1.CacheDevice{{Path: cacheFiles[0]}},
			Port:          int32(h.port),
			Ceph:          rcv1.CephBackend{Monitors: []string{h.cluster.MonV1}, SecretRef: &rcv1.SecretReference{Name: "ceph-user", Namespace: "default"}},
			Image:         "rackcache/dataplane:test",
			DataPath:      rcv1.DataPath{Network: "127.0.0.0/8", Authentication: auth},
			FailoverGrace: &metav1.Duration{Duration: 2 * time.Second},
			// replicas unset: two servers make it 2.
		},
	}
	v := &rcv1.CachedVolume{
		ObjectMeta: metav1.ObjectMeta{Name: vol},
		Spec: rcv1.CachedVolumeSpec{
			PoolName: "fast", RBD: rcv1.RBDImage{Pool: h.cluster.Pool, Image: h.image},
			Size: resource.MustParse("64Mi"), CacheSize: "16Mi", Rack: "r1", WriteMode: rcv1.WriteThrough,
			AllowedHosts: hosts,
		},
	}
	for _, obj := range []client.Object{secret, pool, v} {
		if err := h.g.c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	var srvs []rcv1.ServerStatus
	for _, n := range []string{"n1", "n2"} {
		s := server(n, "r1", true, "100Mi")
		s.DataAddress = h.addrs[n]
		srvs = append(srvs, s)
	}
	h.g.setServers(pool, srvs...)
	return h
}

// serve runs the finalizer pass and the serving pass; it checks that the
// volume has an owner and a mirror, each path in its ANA state.
func (h *haRig) serve(ctx context.Context, t *testing.T, vol string) rcv1.CachedVolumeStatus {
	t.Helper()
	if _, _, err := h.g.pass(vol); err != nil { // adds the finalizer
		t.Fatal(err)
	}
	got, _, err := h.g.pass(vol)
	if err != nil {
		t.Fatalf("serving pass: %v", err)
	}
	st := got.Status
	owner, mirror := st.Server, st.Mirror
	if owner == "" || mirror == "" || owner == mirror || st.Epoch != 1 || st.OwnerCephClient == "" ||
		condition(got, rcv1.ConditionMirrored).Status != metav1.ConditionTrue || len(st.Paths) != 2 ||
		st.Paths[0].Server != owner || st.Paths[0].ANAState != "optimized" || st.Paths[0].Address != h.addrs[owner] ||
		st.Paths[1].Server != mirror || st.Paths[1].ANAState != "inaccessible" || st.Paths[1].Address != h.addrs[mirror] {
		t.Fatalf("after the serving pass: %+v\nconditions %+v", st, st.Conditions)
	}
	nqn := SubsystemNQN(vol)
	wantANA(ctx, t, h.dps[owner].Client, nqn, dataplane.ANAOptimized)
	wantANA(ctx, t, h.dps[mirror].Client, nqn, dataplane.ANAInaccessible)
	// One host connects to both: their controller ids must not meet.
	o, err1 := lookupSubsystem(ctx, h.dps[owner].Client, nqn)
	m, err2 := lookupSubsystem(ctx, h.dps[mirror].Client, nqn)
	if err1 != nil || err2 != nil || o == nil || m == nil || !o.ANAReporting || !m.ANAReporting ||
		o.MaxCntlid < o.MinCntlid || m.MaxCntlid < m.MinCntlid || (o.MaxCntlid >= m.MinCntlid && m.MaxCntlid >= o.MinCntlid) {
		t.Fatalf("owner's subsystem %+v (%v), mirror's %+v (%v): want ANA reporting and disjoint controller id ranges", o, err1, m, err2)
	}
	return st
}

// TestReconcilerMirrorsAndPromotes runs Reconcile passes against a real
// apiserver, two real dataplanes and real Ceph: a write-through volume of
// a two-server pool gets an owner and a mirror exporting one subsystem
// (the owner's path optimized, the mirror's inaccessible, so a host's I/O
// there is refused); the owner is killed with kill -9; after the failover
// grace the mirror is fenced off from it (its Ceph client blocklisted in
// Ceph's own OSD map) and promoted: its path turns optimized, the epoch
// rises, and the old owner is a former server.
func TestReconcilerMirrorsAndPromotes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	h := newHARig(t, ctx, "ha", rcv1.HostAuthenticationDHHMACCHAP, loadgenHostNQN)
	g, cluster, dps, addrs, port := h.g, h.cluster, h.dps, h.addrs, h.port
	st := h.serve(ctx, t, "ha")
	owner, mirror := st.Server, st.Mirror
	g.event("MirrorPlaced")
	nqn := SubsystemNQN("ha")
	// The host's I/O goes through the owner; the mirror refuses it.
	keys := g.hostKeys("ha-host-keys", 1)
	if err := runLoadAt(t, addrs[owner], port, nqn, keys); err != nil {
		t.Fatalf("write through the owner: %v", err)
	}
	if err := runLoadAt(t, addrs[mirror], port, nqn, keys); err == nil {
		t.Fatal("a write through the mirror's inaccessible path succeeded")
	}
	// A second pass changes nothing.
	if again, _, err := g.pass("ha"); err != nil || again.Status.Server != owner || again.Status.Mirror != mirror || again.Status.Epoch != 1 {
		t.Fatalf("second pass: %v, %+v", err, again.Status)
	}

	// The owner's JSON-RPC cut off, its portal still answering (an RPC
	// flood): lost, but no failover, whatever the grace.
	h.rpcCut[owner] = true
	_, _, _ = g.pass("ha")
	g.now = g.now.Add(time.Minute)
	got, _, _ := g.pass("ha")
	if got.Status.Server != owner || got.Status.Epoch != 1 || !strings.Contains(condition(got, rcv1.ConditionReady).Message, "portal") {
		t.Fatalf("owner's RPC cut off, its portal answering: %+v\nready %+v", got.Status, condition(got, rcv1.ConditionReady))
	}
	h.rpcCut[owner] = false
	if got, _, err := g.pass("ha"); err != nil || got.Status.Server != owner || got.Status.Phase != rcv1.VolumeReady {
		t.Fatalf("owner's RPC back: %v, %+v", err, got.Status)
	}

	// kill -9 the owner: lost, the grace runs, then the mirror is promoted.
	fenced := st.OwnerCephClient
	dps[owner].Kill(t)
	got, _, _ = g.pass("ha")
	if got.Status.Server != owner || condition(got, rcv1.ConditionReady).Reason != rcv1.ReasonServerLost {
		t.Fatalf("within the grace: %+v", got.Status)
	}
	g.now = g.now.Add(3 * time.Second)
	got, _, err := g.pass("ha")
	if err != nil {
		t.Fatalf("promoting pass: %v", err)
	}
	st = got.Status
	if st.Server != mirror || st.Epoch != 2 || st.Mirror != "" || len(st.FormerServers) != 1 || st.FormerServers[0] != owner ||
		condition(got, rcv1.ConditionPlaced).Reason != rcv1.ReasonPromoted || got.Status.Phase != rcv1.VolumeReady ||
		len(st.Paths) != 1 || st.Paths[0].Server != mirror || st.Paths[0].ANAState != "optimized" {
		t.Fatalf("after the promotion: %+v\nconditions %+v", st, st.Conditions)
	}
	g.event("Promoted")
	wantANA(ctx, t, dps[mirror].Client, nqn, dataplane.ANAOptimized)
	out, err := cluster.Admin(ctx, "ceph", "osd", "blocklist", "ls")
	if err != nil || !strings.Contains(out, strings.TrimPrefix(fenced, "v2:")) {
		t.Fatalf("Ceph's blocklist (%v):\n%s\nwant the old owner's client %s", err, out, fenced)
	}
	if err := runLoadAt(t, addrs[mirror], port, nqn, keys); err != nil {
		t.Fatalf("write through the promoted mirror: %v", err)
	}
	// No third server: the volume runs on one copy and says so.
	if c := condition(got, rcv1.ConditionMirrored); c.Status != metav1.ConditionFalse {
		t.Errorf("Mirrored with no server left for a mirror: %+v", c)
	}
}

// wantANA checks the state the server's listener reports for the volume's
// ANA group.
func wantANA(ctx context.Context, t *testing.T, c *dataplane.Client, nqn string, want dataplane.ANAState) {
	t.Helper()
	ls, err := c.Listeners(ctx, nqn)
	if err != nil || len(ls) != 1 {
		t.Fatalf("listeners of %s: %+v, %v", nqn, ls, err)
	}
	for _, g := range ls[0].ANAStates {
		if g.Group == anaGroup {
			if g.State != want {
				t.Errorf("listener %s:%s reports %s, want %s", ls[0].Address.TrAddr, ls[0].Address.TrSvcID, g.State, want)
			}
			return
		}
	}
	t.Errorf("listener of %s reports no ANA group %d: %+v", nqn, anaGroup, ls[0])
}
