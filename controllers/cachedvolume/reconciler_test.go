package cachedvolume

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/servers"
	"github.com/rackcache/rackcache/test/framework"
)

// reconcilerRig runs Reconcile passes by hand against a real apiserver
// (envtest), with an injected clock. No dataplane runs: these passes cover
// what is decided from the API objects (placement, the lost-server rule,
// deletion without a reachable server); apply_test.go covers the dataplane.
type reconcilerRig struct {
	t      *testing.T
	c      client.Client
	r      *Reconciler
	events *record.FakeRecorder
	now    time.Time
}

func newReconcilerRig(t *testing.T) *reconcilerRig {
	_, cfg := framework.StartEnvtest(t, filepath.Join(framework.RepoRoot(), "config", "crd", "bases"))
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := rcv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// The operator's namespace, where it keeps the volumes' host keys.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rackcache-system"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	rig := &reconcilerRig{t: t, c: c, events: record.NewFakeRecorder(100), now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	rig.r = &Reconciler{
		Client: c, Namespace: "rackcache-system",
		Connector: &servers.Connector{Reader: c, Namespace: "rackcache-system",
			Tokens: &servers.Tokens{Client: c, Namespace: "rackcache-system", ServiceAccount: servers.OperatorServiceAccount}},
		Recorder:        rig.events,
		ServerLostGrace: 5 * time.Minute,
		StatsInterval:   30 * time.Second,
		Now:             func() time.Time { return rig.now },
		Rand:            rand.New(rand.NewPCG(1, 2)),
	}
	return rig
}

// pass runs one Reconcile (its error is expected: no dataplane answers)
// and returns the volume afterwards (nil when it is gone).
func (g *reconcilerRig) pass(name string) (*rcv1.CachedVolume, ctrl.Result, error) {
	g.t.Helper()
	res, err := g.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: name}})
	vol := &rcv1.CachedVolume{}
	if gerr := g.c.Get(context.Background(), client.ObjectKey{Name: name}, vol); apierrors.IsNotFound(gerr) {
		return nil, res, err
	} else if gerr != nil {
		g.t.Fatal(gerr)
	}
	return vol, res, err
}

func (g *reconcilerRig) event(reason string) string {
	g.t.Helper()
	for {
		select {
		case e := <-g.events.Events:
			if strings.Contains(e, " "+reason+" ") {
				return e
			}
		default:
			g.t.Fatalf("no %s event", reason)
			return ""
		}
	}
}

// noEvent drains the recorded events and fails on one with reason.
func (g *reconcilerRig) noEvent(reason string) {
	g.t.Helper()
	for {
		select {
		case e := <-g.events.Events:
			if strings.Contains(e, " "+reason+" ") {
				g.t.Errorf("unexpected event %q", e)
			}
		default:
			return
		}
	}
}

func condition(vol *rcv1.CachedVolume, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(vol.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func server(name, rack string, ready bool, capacity string) rcv1.ServerStatus {
	q := resource.MustParse(capacity)
	return rcv1.ServerStatus{NodeName: name, Rack: rack, Address: "127.0.0.9", Ready: ready, Capacity: &q}
}

func (g *reconcilerRig) setServers(pool *rcv1.CachePool, s ...rcv1.ServerStatus) {
	g.t.Helper()
	if err := g.c.Get(context.Background(), client.ObjectKeyFromObject(pool), pool); err != nil {
		g.t.Fatal(err)
	}
	pool.Status.Servers = s
	if err := g.c.Status().Update(context.Background(), pool); err != nil {
		g.t.Fatal(err)
	}
}

func (g *reconcilerRig) newVolume(name, rack, cache string, mode rcv1.WriteMode) {
	g.t.Helper()
	v := &rcv1.CachedVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: rcv1.CachedVolumeSpec{
			PoolName: "fast", RBD: rcv1.RBDImage{Pool: "rbd", Image: name},
			Size: resource.MustParse("100Gi"), CacheSize: rcv1.CacheSize(cache), Rack: rack, WriteMode: mode,
		},
	}
	if err := g.c.Create(context.Background(), v); err != nil {
		g.t.Fatal(err)
	}
	// The first pass only adds the finalizer.
	if vol, _, err := g.pass(name); err != nil || !strings.Contains(strings.Join(vol.Finalizers, ","), rcv1.CachedVolumeFinalizer) {
		g.t.Fatalf("first pass: finalizers %v, %v", vol.Finalizers, err)
	}
}

func TestReconcilerPlacementLostServersAndDeletion(t *testing.T) {
	g := newReconcilerRig(t)
	ctx := context.Background()

	// A volume whose pool does not exist waits, Pending.
	g.newVolume("early", "r1", "1Gi", "")
	vol, _, err := g.pass("early")
	if err != nil || vol.Status.Phase != rcv1.VolumePending || condition(vol, rcv1.ConditionPlaced).Reason != rcv1.ReasonPoolNotFound {
		t.Fatalf("without a pool: phase %s, placed %+v, %v", vol.Status.Phase, condition(vol, rcv1.ConditionPlaced), err)
	}

	pool := &rcv1.CachePool{
		ObjectMeta: metav1.ObjectMeta{Name: "fast"},
		Spec: rcv1.CachePoolSpec{
			NodeSelector: map[string]string{"rackcache.io/cache-server": "true"},
			Devices:      []rcv1.CacheDevice{{Path: "/dev/nvme1n1"}},
			Ceph:         rcv1.CephBackend{Monitors: []string{"127.0.0.1:6789"}, SecretRef: &rcv1.SecretReference{Name: "ceph-user", Namespace: "default"}},
			Image:        "rackcache/dataplane:test",
		},
	}
	if err := g.c.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	g.setServers(pool, server("a1", "r1", true, "10Gi"), server("a2", "r1", true, "10Gi"), server("b1", "r2", true, "10Gi"))

	// In rack: placed on a server of r1, status and event say so; the
	// dataplane cannot be configured here (no Ceph Secret), which status says.
	vol, _, err = g.pass("early")
	if vol.Status.Server != "a1" && vol.Status.Server != "a2" || vol.Status.CrossRack || vol.Status.Rack != "r1" {
		t.Fatalf("placed on %q rack %q crossRack %v, want a server of r1", vol.Status.Server, vol.Status.Rack, vol.Status.CrossRack)
	}
	if c := condition(vol, rcv1.ConditionPlaced); c.Status != metav1.ConditionTrue || c.Reason != rcv1.ReasonPlacedInRack {
		t.Errorf("Placed = %+v", c)
	}
	if c := condition(vol, rcv1.ConditionReady); err == nil || c.Reason != rcv1.ReasonCephUnavailable {
		t.Errorf("Ready = %+v, err %v: want CephUnavailable", c, err)
	}
	if vol.Status.CacheSize == nil || vol.Status.CacheSize.Value() != 1<<30 || vol.Status.Phase != rcv1.VolumePlacing {
		t.Errorf("cacheSize %v phase %s", vol.Status.CacheSize, vol.Status.Phase)
	}
	g.event("Placed")
	first := vol.Status.Server

	// Placement stays put on later passes.
	if vol, _, _ = g.pass("early"); vol.Status.Server != first {
		t.Errorf("a placed volume moved from %s to %s", first, vol.Status.Server)
	}

	// Rack r1 has 9 GiB free on one server only; 9.5 GiB goes across racks.
	g.newVolume("big", "r1", "9500Mi", "")
	vol, _, _ = g.pass("big")
	if vol.Status.Server != "a1" && vol.Status.Server != "a2" || vol.Status.Server == first {
		t.Fatalf("9500Mi in r1: placed on %q, want the r1 server other than %s", vol.Status.Server, first)
	}
	g.newVolume("bigger", "r1", "9500Mi", "")
	vol, _, _ = g.pass("bigger")
	if vol.Status.Server != "b1" || !vol.Status.CrossRack || condition(vol, rcv1.ConditionPlaced).Reason != rcv1.ReasonPlacedCrossRack {
		t.Fatalf("rack r1 full: placed on %q crossRack %v %+v, want b1 across racks", vol.Status.Server, vol.Status.CrossRack, condition(vol, rcv1.ConditionPlaced))
	}
	g.event("Placed")

	// Nothing left anywhere: NoCapacity, saying rack and need.
	g.newVolume("huge", "r2", "9500Mi", "")
	vol, res, _ := g.pass("huge")
	if c := condition(vol, rcv1.ConditionPlaced); c.Reason != rcv1.ReasonNoCapacity || !strings.Contains(c.Message, "rack r2") ||
		!strings.Contains(c.Message, "9500 MiB") || vol.Status.Phase != rcv1.VolumePending || res.RequeueAfter == 0 {
		t.Errorf("no capacity: %+v phase %s requeue %v", c, vol.Status.Phase, res.RequeueAfter)
	}

	// Lost server: b1 not ready. Ready False at once; after the grace the
	// write-through volume moves, the write-back one is Degraded and stays.
	g.newVolume("wb", "r2", "100Mi", rcv1.WriteBack)
	if vol, _, _ = g.pass("wb"); vol.Status.Server != "b1" {
		t.Fatalf("wb placed on %q, want b1", vol.Status.Server)
	}
	g.setServers(pool, server("a1", "r1", true, "10Gi"), server("a2", "r1", true, "10Gi"), server("b1", "r2", false, "10Gi"), server("c1", "r3", true, "20Gi"))
	for _, name := range []string{"bigger", "wb"} {
		vol, res, _ = g.pass(name)
		if c := condition(vol, rcv1.ConditionReady); c.Reason != rcv1.ReasonServerLost || vol.Status.Server != "b1" ||
			vol.Status.Phase != rcv1.VolumeDegraded || res.RequeueAfter <= 0 || res.RequeueAfter > 30*time.Second {
			t.Errorf("%s within grace: Ready %+v server %s phase %s requeue %v", name, c, vol.Status.Server, vol.Status.Phase, res.RequeueAfter)
		}
	}
	g.now = g.now.Add(4 * time.Minute)
	if vol, _, _ = g.pass("bigger"); vol.Status.Server != "b1" {
		t.Errorf("moved before the grace ended: %s", vol.Status.Server)
	}
	g.now = g.now.Add(2 * time.Minute)
	vol, _, _ = g.pass("bigger")
	if vol.Status.Server != "c1" || condition(vol, rcv1.ConditionPlaced).Reason != rcv1.ReasonReplaced {
		t.Errorf("write-through after the grace: server %s Placed %+v, want c1 Replaced", vol.Status.Server, condition(vol, rcv1.ConditionPlaced))
	}
	g.event("Replaced")
	vol, _, _ = g.pass("wb")
	if c := condition(vol, rcv1.ConditionDegraded); vol.Status.Server != "b1" || c.Reason != rcv1.ReasonDirtyDataOnLostServer ||
		!strings.Contains(c.Message, "b1") || !strings.Contains(c.Message, DiscardDirtyDataAnnotation) || vol.Status.Phase != rcv1.VolumeDegraded {
		t.Errorf("write-back after the grace: server %s phase %s Degraded %+v", vol.Status.Server, vol.Status.Phase, c)
	}
	g.event("Degraded")

	// Deleting the write-back volume keeps the finalizer (dirty data on b1)
	// until the discard annotation gives that data up.
	if err := g.c.Delete(ctx, vol); err != nil {
		t.Fatal(err)
	}
	vol, _, err = g.pass("wb")
	if vol == nil || err != nil || vol.Status.Phase != rcv1.VolumeDeleting || !strings.Contains(condition(vol, rcv1.ConditionReady).Message, DiscardDirtyDataAnnotation) {
		t.Fatalf("write-back on a lost server deleted without the annotation: %v %+v", err, vol)
	}
	patch := client.MergeFrom(vol.DeepCopy())
	vol.Annotations = map[string]string{DiscardDirtyDataAnnotation: "true"}
	if err := g.c.Patch(ctx, vol, patch); err != nil {
		t.Fatal(err)
	}
	if vol, _, err = g.pass("wb"); vol != nil || err != nil {
		t.Errorf("with the discard annotation the volume stays: %+v, %v", vol, err)
	}

	// A volume never placed has nothing to remove.
	if err := g.c.Delete(ctx, &rcv1.CachedVolume{ObjectMeta: metav1.ObjectMeta{Name: "huge"}}); err != nil {
		t.Fatal(err)
	}
	if vol, _, err = g.pass("huge"); vol != nil || err != nil {
		t.Errorf("unplaced volume not deleted: %+v, %v", vol, err)
	}
}
