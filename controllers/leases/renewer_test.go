package leases

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/test/framework"
)

func pool(name string, leased bool, servers ...string) *rcv1.CachePool {
	p := &rcv1.CachePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if leased {
		p.Spec.FailoverGrace = &metav1.Duration{Duration: 4 * time.Second}
	}
	for _, s := range servers {
		p.Status.Servers = append(p.Status.Servers, rcv1.ServerStatus{NodeName: s})
	}
	return p
}

func duration(p *rcv1.CachePool) time.Duration {
	if p.Spec.FailoverGrace == nil {
		return 0
	}
	return p.Spec.FailoverGrace.Duration
}

// The renewer grants real dataplanes their lease: the servers of a pool
// that wants leases get one, those of a pool that does not and a former
// server of some volume (its fence must stay up until its stale objects
// are gone) get none. ExpiredAt never says a lease ran out before the
// renewer's start plus a lease, nor before the last renewal sent plus a
// lease.
func TestRenewerGrantsLeases(t *testing.T) {
	dps := map[string]*framework.Dataplane{"a": framework.StartDataplane(t), "b": framework.StartDataplane(t), "c": framework.StartDataplane(t)}
	scheme := runtime.NewScheme()
	if err := rcv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	former := &rcv1.CachedVolume{ObjectMeta: metav1.ObjectMeta{Name: "v"}, Spec: rcv1.CachedVolumeSpec{PoolName: "ha"},
		Status: rcv1.CachedVolumeStatus{FormerServers: []string{"b"}}}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(pool("ha", true, "a", "b"), pool("single", false, "c"), pool("gone", true, "d"), former).WithStatusSubresource(former).Build()
	if err := c.Status().Update(context.Background(), former); err != nil {
		t.Fatal(err)
	}
	// Server d never answers: its pool's volumes are woken.
	unanswered := make(chan event.GenericEvent, 16)
	r := &Renewer{Client: c, Duration: duration, Unanswered: unanswered,
		Dial: func(_ context.Context, _, node, _ string) (*dataplane.Client, error) {
			if node == "d" {
				return dataplane.NewUnixClient(t.TempDir() + "/none.sock"), nil
			}
			return dps[node].Client, nil
		}}
	if !r.ExpiredAt(pool("ha", true), "a").IsZero() {
		t.Error("ExpiredAt before the renewer runs must be zero")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()

	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := dps["a"].Client.Lease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Granted {
			if st.Holder != Holder || st.Fenced || st.ExpiresIn() <= 0 || st.ExpiresIn() > 4*time.Second {
				t.Errorf("server a's lease: %+v", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("server a got no lease within 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A few more renewal rounds: the others still have none.
	time.Sleep(2 * time.Second)
	for _, n := range []string{"b", "c"} {
		st, err := dps[n].Client.Lease(ctx)
		if err != nil || st.Granted {
			t.Errorf("server %s: %+v, %v; want no lease", n, st, err)
		}
	}
	at := r.ExpiredAt(pool("ha", true), "a")
	if min := start.Add(4 * time.Second); at.Before(min) || at.After(time.Now().Add(4*time.Second)) {
		t.Errorf("ExpiredAt(a) = %v, want between %v and now + 4 s", at, min)
	}
	if !r.ExpiredAt(pool("single", false), "c").IsZero() {
		t.Error("a pool without leases: ExpiredAt must be zero")
	}
	select {
	case e := <-unanswered:
		if e.Object.GetName() != "gone" {
			t.Errorf("woke pool %s, want gone (server d does not answer)", e.Object.GetName())
		}
	default:
		t.Error("server d's unanswered renewals woke no pool")
	}
	// A renewal that never reached d does not move its lease's end past
	// the renewer's start plus a lease.
	if at := r.ExpiredAt(pool("gone", true), "d"); at.After(start.Add(5 * time.Second)) {
		t.Errorf("ExpiredAt(d) = %v, later than the start plus a lease", at)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start: %v", err)
	}
}

// A renewal that never reached the server (nothing listens) does not push
// its lease's end further; one that may have reached it does.
func TestNeverSent(t *testing.T) {
	c := dataplane.NewUnixClient(t.TempDir() + "/none.sock")
	err := c.RenewLease(context.Background(), Holder, time.Second)
	if err == nil || !neverSent(err) {
		t.Errorf("a call to a missing socket: %v, neverSent %v", err, err != nil && neverSent(err))
	}
	if neverSent(context.DeadlineExceeded) {
		t.Error("a timeout may have been granted")
	}
}
