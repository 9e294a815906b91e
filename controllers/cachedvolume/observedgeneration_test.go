package cachedvolume

import (
	"testing"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// observedGeneration advances only when the pass applied the spec.
func TestDeriveStatusObservedGeneration(t *testing.T) {
	for _, tc := range []struct {
		name string
		obs  Observation
		want int64
	}{
		{"applied", Observation{Placed: true, Applied: true}, 3},
		{"pool missing", Observation{PoolMissing: true}, 1},
		{"server lost, waiting", Observation{Placed: true, LostServer: "a", Lost: &LostDecision{Action: LostWaiting, Why: "pod gone"}}, 1},
		{"no capacity", Observation{NoCapacity: "no server has room"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vol := &rcv1.CachedVolume{}
			vol.Generation = 3
			vol.Status.ObservedGeneration = 1
			tc.obs.Generation = 3
			(&Reconciler{}).deriveStatus(&scope{vol: vol, obs: tc.obs}, true)
			if got := vol.Status.ObservedGeneration; got != tc.want {
				t.Fatalf("observedGeneration = %d, want %d", got, tc.want)
			}
		})
	}
}
