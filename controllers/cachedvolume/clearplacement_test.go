package cachedvolume

import (
	"testing"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// A re-placed volume keeps the write mode it was created with, not the
// pool's current one.
func TestClearPlacementKeepsWriteMode(t *testing.T) {
	vol := &rcv1.CachedVolume{}
	vol.Status.Server, vol.Status.Address, vol.Status.Port = "a", "10.0.0.1", 4420
	vol.Status.WriteMode = rcv1.WriteBack
	clearPlacement(vol)
	if vol.Status.Server != "" || vol.Status.Address != "" || vol.Status.Port != 0 {
		t.Fatalf("placement not cleared: %+v", vol.Status)
	}
	if vol.Status.WriteMode != rcv1.WriteBack {
		t.Fatalf("writeMode = %q after clearPlacement, want %q", vol.Status.WriteMode, rcv1.WriteBack)
	}
}
