package cachedvolume

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// A volume already Ready=False for another reason starts its lost-server
// grace when the server is found lost, not when Ready first turned False.
func TestLostSinceRestartsWhenReasonBecomesServerLost(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	later := t0.Add(time.Hour)
	vol := &rcv1.CachedVolume{}
	SetConditions(&vol.Status.Conditions, &Observation{Now: t0, Placed: true, CephError: "monitors do not answer"})
	if c := meta.FindStatusCondition(vol.Status.Conditions, rcv1.ConditionReady); c == nil || c.Reason != rcv1.ReasonCephUnavailable {
		t.Fatalf("set-up: Ready = %+v, want False/CephUnavailable", c)
	}
	SetConditions(&vol.Status.Conditions, &Observation{Now: later, Placed: true, LostServer: "a",
		Lost: &LostDecision{Action: LostWaiting, Why: "pod not ready"}})
	if got := lostSince(vol); !got.Equal(later) {
		t.Fatalf("lostSince = %v, want %v (the time the server was found lost)", got, later)
	}
	// Still lost one pass later: the clock keeps running from the first pass.
	SetConditions(&vol.Status.Conditions, &Observation{Now: later.Add(time.Minute), Placed: true, LostServer: "a",
		Lost: &LostDecision{Action: LostWaiting, Why: "pod not ready"}})
	if got := lostSince(vol); !got.Equal(later) {
		t.Fatalf("lostSince = %v after a second lost pass, want %v", got, later)
	}
}
