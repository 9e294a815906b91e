package cachedvolume

import (
	"testing"
	"time"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

func TestDecideLost(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	grace := 5 * time.Minute
	cases := []struct {
		name string
		in   LostInput
		want LostAction
		left time.Duration
	}{
		{"healthy", LostInput{Listed: true, Ready: true}, ServerHealthy, 0},
		{"absent, just seen: wait the whole grace", LostInput{Listed: false}, LostWaiting, grace},
		{"not ready, halfway", LostInput{Listed: true, LostSince: now.Add(-2 * time.Minute)}, LostWaiting, 3 * time.Minute},
		{"RPC fails, grace over, write-through: re-place", LostInput{Listed: true, Ready: true, RPCError: "connection refused", LostSince: now.Add(-grace)}, LostReplace, 0},
		{"absent, grace over, write-back: degrade, never move", LostInput{MayHoldDirtyData: true, LostSince: now.Add(-time.Hour)}, LostDegrade, 0},
		{"write-back within grace waits too", LostInput{Listed: true, MayHoldDirtyData: true, LostSince: now.Add(-time.Minute)}, LostWaiting, 4 * time.Minute},
		// A ready mirror: the failover grace, then promotion.
		{"mirror ready, within the failover grace", LostInput{Listed: true, Promotable: true, FailoverGrace: 10 * time.Second, LostSince: now.Add(-4 * time.Second)}, LostWaiting, 6 * time.Second},
		{"mirror ready, failover grace over: promote", LostInput{Listed: true, Promotable: true, FailoverGrace: 10 * time.Second, LostSince: now.Add(-10 * time.Second)}, LostPromote, 0},
		{"write-back with a mirror in sync is promoted", LostInput{Promotable: true, MayHoldDirtyData: true, FailoverGrace: 10 * time.Second, LostSince: now.Add(-10 * time.Second)}, LostPromote, 0},
		{"write-back, mirror not in sync: degraded", LostInput{MayHoldDirtyData: true, FailoverGrace: 10 * time.Second, LostSince: now.Add(-time.Hour)}, LostDegrade, 0},
		{"write-back, mirror not in sync: the long grace", LostInput{MayHoldDirtyData: true, FailoverGrace: 10 * time.Second, LostSince: now.Add(-time.Minute)}, LostWaiting, 4 * time.Minute},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.in.Now, c.in.Grace = now, grace
			got := DecideLost(c.in)
			if got.Action != c.want || got.RequeueAfter != c.left {
				t.Errorf("DecideLost = %+v, want action %v requeue %v", got, c.want, c.left)
			}
			if c.want != ServerHealthy && got.Why == "" {
				t.Errorf("a lost decision must say why")
			}
		})
	}
}

// TestWriteBackNeverReplaced: whatever the write mode mix, a volume that
// runs or asks for write-back is never re-placed.
func TestWriteBackNeverReplaced(t *testing.T) {
	modes := []rcv1.WriteMode{"", rcv1.WriteThrough, rcv1.WriteBack, rcv1.WriteAround, rcv1.PassThrough}
	for _, running := range modes {
		for _, wanted := range modes {
			d := DecideLost(LostInput{MayHoldDirtyData: mayHoldDirtyData(running, wanted), Now: time.Now(), LostSince: time.Now().Add(-time.Hour), Grace: time.Minute})
			wb := running == rcv1.WriteBack || wanted == rcv1.WriteBack
			if wb && d.Action != LostDegrade || !wb && d.Action != LostReplace {
				t.Errorf("running %q wanted %q: action %v", running, wanted, d.Action)
			}
		}
	}
}
