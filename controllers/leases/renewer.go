// Package leases keeps the cache servers of pools with mirrored volumes on
// a short lease that only the operator renews. A server whose lease runs
// out fences itself: every path it exports with ANA turns inaccessible,
// so it acknowledges no more writes (docs/dataplane.md, "The lease"). The
// operator promotes a lost owner's mirror only once that owner's lease has
// surely run out: a server cut off from the operator but not from its
// hosts then serves nothing while the mirror takes over.
package leases

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dataplane"
)

// Holder names the operator in the dataplanes' lease logs.
const Holder = "rackcache-operator"

// minDuration is the shortest lease the dataplane grants.
const minDuration = time.Second

// Renewer renews the lease of every server of every pool that wants one,
// a quarter of the lease apart, and remembers when each renewal was sent.
type Renewer struct {
	Client client.Reader
	// Dial makes the client of a server.
	Dial func(ctx context.Context, pool, node, address string) (*dataplane.Client, error)
	// Duration is a pool's lease (0: the pool's servers get none).
	Duration func(pool *rcv1.CachePool) time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Unanswered, when set, gets the pool of every server whose renewal
	// failed (never blocking): the volumes there are looked at at once,
	// so a lost server is noticed within a renewal period, not a status
	// interval.
	Unanswered chan<- event.GenericEvent

	mu      sync.Mutex
	started time.Time
	// sent is when the last renewal to each server was sent, and for how
	// long: the server's lease runs from when it got it, which is later.
	sent map[serverKey]grant
}

type serverKey struct{ pool, node string }

type grant struct {
	at time.Time
	d  time.Duration
}

// Start renews until ctx ends (a controller-runtime Runnable).
func (r *Renewer) Start(ctx context.Context) error {
	r.mu.Lock()
	r.started = r.now()
	r.sent = map[serverKey]grant{}
	r.mu.Unlock()
	// A quarter of the shortest lease: each server's own period (a
	// quarter of its lease) is then kept, not rounded up to the tick.
	t := time.NewTicker(minDuration / 4)
	defer t.Stop()
	next := map[serverKey]time.Time{}
	for {
		r.renewDue(ctx, next)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection: only the leading operator grants leases.
func (r *Renewer) NeedLeaderElection() bool { return true }

// renewDue renews each server whose next renewal is due, each on its own
// goroutine bounded by a quarter of its lease.
func (r *Renewer) renewDue(ctx context.Context, next map[serverKey]time.Time) {
	var pools rcv1.CachePoolList
	if err := r.Client.List(ctx, &pools); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list CachePools to renew their servers' leases")
		return
	}
	former, err := r.formerServers(ctx)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list CachedVolumes to renew their servers' leases")
		return
	}
	var wg sync.WaitGroup
	for i := range pools.Items {
		pool := &pools.Items[i]
		d := r.Duration(pool)
		if d < minDuration {
			continue
		}
		for _, s := range pool.Status.Servers {
			k := serverKey{pool.Name, s.NodeName}
			if former[k] || r.now().Before(next[k]) {
				continue
			}
			next[k] = r.now().Add(d / 4)
			wg.Add(1)
			go func(address string) {
				defer wg.Done()
				r.renew(ctx, k, address, d)
			}(s.Address)
		}
	}
	wg.Wait()
}

// formerServers are the servers some volume was moved away from and whose
// objects for it are not removed yet. They get no lease: renewing it would
// lift their fence, and a returning former owner would serve its stale
// cache on an optimized path until the volume's next pass removes it.
func (r *Renewer) formerServers(ctx context.Context) (map[serverKey]bool, error) {
	var vols rcv1.CachedVolumeList
	if err := r.Client.List(ctx, &vols); err != nil {
		return nil, err
	}
	out := map[serverKey]bool{}
	for _, v := range vols.Items {
		for _, n := range v.Status.FormerServers {
			out[serverKey{v.Spec.PoolName, n}] = true
		}
	}
	return out, nil
}

func (r *Renewer) renew(ctx context.Context, k serverKey, address string, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d/4)
	defer cancel()
	c, err := r.Dial(ctx, k.pool, k.node, address)
	if err != nil {
		return
	}
	sentAt := r.now()
	err = c.RenewLease(ctx, Holder, d)
	var refused *dataplane.RPCError
	if err != nil && !errors.As(err, &refused) {
		// No answer at all (a refusal is an answer: the server lives).
		r.tell(k.pool)
	}
	if err != nil && neverSent(err) {
		// The server never got it: its lease runs from the last renewal
		// that may have reached it.
		ctrl.LoggerFrom(ctx).V(1).Info("lease not renewed", "pool", k.pool, "server", k.node, "error", err.Error())
		return
	}
	// Answered, or maybe granted (a timeout, a connection cut after the
	// call went out): the lease may run from as late as now.
	r.mu.Lock()
	r.sent[k] = grant{sentAt, d}
	r.mu.Unlock()
	if err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("lease renewal unanswered", "pool", k.pool, "server", k.node, "error", err.Error())
	}
}

// tell wakes the volumes of pool (a dropped event is fine: the next
// failed renewal sends another).
func (r *Renewer) tell(pool string) {
	if r.Unanswered == nil {
		return
	}
	select {
	case r.Unanswered <- event.GenericEvent{Object: &rcv1.CachePool{ObjectMeta: metav1.ObjectMeta{Name: pool}}}:
	default:
	}
}

// neverSent: the call failed before a connection to the server existed
// (refused, no route, no socket), so it cannot have been granted.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// ExpiredAt is when pool's server node has surely lost its lease: the
// last renewal sent plus its duration, and never before the renewer
// started plus the longest lease (an operator before this one may have
// renewed just before it stopped). Zero when the renewer does not run.
func (r *Renewer) ExpiredAt(pool *rcv1.CachePool, node string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started.IsZero() {
		return time.Time{}
	}
	d := r.Duration(pool)
	if d < minDuration {
		return time.Time{}
	}
	at := r.started.Add(d)
	if g, ok := r.sent[serverKey{pool.Name, node}]; ok && g.at.Add(g.d).After(at) {
		at = g.at.Add(g.d)
	}
	return at
}

func (r *Renewer) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}
