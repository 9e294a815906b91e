package cachedvolume

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

func TestConditionsAndPhase(t *testing.T) {
	placed := Observation{Placed: true, PlacedReason: rcv1.ReasonPlacedInRack}
	with := func(f func(*Observation)) Observation { o := placed; f(&o); return o }
	type cond struct {
		status metav1.ConditionStatus
		reason string
	}
	cases := []struct {
		name                              string
		obs                               Observation
		phase                             rcv1.CachedVolumePhase
		ready, placedC, degraded, flushed cond
		msg                               string // substring of some condition's message
	}{
		{"pool missing", Observation{PoolMissing: true}, rcv1.VolumePending,
			cond{"False", rcv1.ReasonPoolNotFound}, cond{"False", rcv1.ReasonPoolNotFound}, cond{"False", rcv1.ReasonAsExpected}, cond{"Unknown", rcv1.ReasonUnknown}, ""},
		{"no capacity", Observation{NoCapacity: "no ready cache server in rack r1 has 1024 MiB of cache free"}, rcv1.VolumePending,
			cond{"False", rcv1.ReasonNoCapacity}, cond{"False", rcv1.ReasonNoCapacity}, cond{"False", rcv1.ReasonAsExpected}, cond{"Unknown", rcv1.ReasonUnknown}, "rack r1"},
		{"ready", with(func(o *Observation) { o.Applied = true }), rcv1.VolumeReady,
			cond{"True", rcv1.ReasonAsExpected}, cond{"True", rcv1.ReasonPlacedInRack}, cond{"False", rcv1.ReasonAsExpected}, cond{"True", rcv1.ReasonAsExpected}, ""},
		{"placed, dataplane refused", with(func(o *Observation) { o.DataplaneError = "create cached bdev: no space" }), rcv1.VolumePlacing,
			cond{"False", rcv1.ReasonDataplaneError}, cond{"True", rcv1.ReasonPlacedInRack}, cond{"False", rcv1.ReasonAsExpected}, cond{"Unknown", rcv1.ReasonUnknown}, "no space"},
		{"ceph unavailable", with(func(o *Observation) { o.CephError = "read Rook monitors" }), rcv1.VolumePlacing,
			cond{"False", rcv1.ReasonCephUnavailable}, cond{"True", rcv1.ReasonPlacedInRack}, cond{"False", rcv1.ReasonAsExpected}, cond{"Unknown", rcv1.ReasonUnknown}, "Rook"},
		{"flushing before leaving write-back", with(func(o *Observation) { o.Applied, o.Flushing, o.FlushDirty = true, true, 4096 }), rcv1.VolumeFlushing,
			cond{"True", rcv1.ReasonAsExpected}, cond{"True", rcv1.ReasonPlacedInRack}, cond{"False", rcv1.ReasonAsExpected}, cond{"False", rcv1.ReasonFlushing}, "4096 bytes left"},
		{"flush failed", with(func(o *Observation) { o.Applied, o.Flushing, o.FlushError = true, true, "rbd write: EIO" }), rcv1.VolumeFlushing,
			cond{"True", rcv1.ReasonAsExpected}, cond{"True", rcv1.ReasonPlacedInRack}, cond{"False", rcv1.ReasonAsExpected}, cond{"False", rcv1.ReasonFlushFailed}, "EIO"},
		{"server lost, within grace", with(func(o *Observation) {
			o.Lost, o.LostServer = &LostDecision{Action: LostWaiting, Why: "the pool reports the server not ready"}, "node-7"
		}), rcv1.VolumeDegraded,
			cond{"False", rcv1.ReasonServerLost}, cond{"True", rcv1.ReasonPlacedInRack}, cond{"True", rcv1.ReasonServerLost}, cond{"Unknown", rcv1.ReasonUnknown}, "node-7"},
		{"write-back on a lost server", with(func(o *Observation) {
			o.Lost, o.LostServer = &LostDecision{Action: LostDegrade, Why: "gone"}, "node-7"
		}), rcv1.VolumeDegraded,
			cond{"False", rcv1.ReasonServerLost}, cond{"True", rcv1.ReasonPlacedInRack}, cond{"True", rcv1.ReasonDirtyDataOnLostServer}, cond{"Unknown", rcv1.ReasonUnknown}, DiscardDirtyDataAnnotation},
		{"re-placed", Observation{Placed: true, PlacedReason: rcv1.ReasonReplaced, PlacedMessage: "re-placed", Applied: true}, rcv1.VolumeReady,
			cond{"True", rcv1.ReasonAsExpected}, cond{"True", rcv1.ReasonReplaced}, cond{"False", rcv1.ReasonAsExpected}, cond{"True", rcv1.ReasonAsExpected}, ""},
		{"cache device failed", with(func(o *Observation) { o.Applied, o.CacheDegraded = true, true }), rcv1.VolumeDegraded,
			cond{"True", rcv1.ReasonAsExpected}, cond{"True", rcv1.ReasonPlacedInRack}, cond{"True", rcv1.ReasonDataplaneError}, cond{"True", rcv1.ReasonAsExpected}, "cache device failed"},
		{"cache metadata damaged", with(func(o *Observation) {
			o.DataplaneError = "refused"
			o.CacheDamaged = "cache volume cv-v on cache device cache0: the newest metadata of unit(s) [1] is damaged; 32768 dirty bytes"
		}), rcv1.VolumeDegraded,
			cond{"False", rcv1.ReasonDataplaneError}, cond{"True", rcv1.ReasonPlacedInRack}, cond{"True", rcv1.ReasonCacheMetadataDamaged}, cond{"Unknown", rcv1.ReasonUnknown}, "32768 dirty bytes"},
		{"dirty data damaged: served, except the damaged bytes", with(func(o *Observation) {
			o.Applied, o.FlushError = true, "dirty data at bytes 1048576+4096 failed its checksum"
			o.DamagedDirtyBytes, o.CacheDevice = 4096, "cache0"
		}), rcv1.VolumeDegraded,
			cond{"True", rcv1.ReasonAsExpected}, cond{"True", rcv1.ReasonPlacedInRack}, cond{"True", rcv1.ReasonDirtyDataDamaged}, cond{"False", rcv1.ReasonFlushFailed}, "4096 bytes of the volume's write-back data failed their checksum on cache device cache0"},
		{"deleting, flushing", with(func(o *Observation) { o.Deleting, o.Flushing = true, true }), rcv1.VolumeDeleting,
			cond{"False", rcv1.ReasonDeleting}, cond{"True", rcv1.ReasonPlacedInRack}, cond{"False", rcv1.ReasonAsExpected}, cond{"False", rcv1.ReasonFlushing}, ""},
		{"deletion blocked by dirty data on a lost server", with(func(o *Observation) { o.Deleting, o.DeleteBlocked = true, "holds dirty data" }), rcv1.VolumeDeleting,
			cond{"False", rcv1.ReasonDeleting}, cond{"True", rcv1.ReasonPlacedInRack}, cond{"False", rcv1.ReasonAsExpected}, cond{"Unknown", rcv1.ReasonUnknown}, "holds dirty data"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.obs.Generation = 7
			var conds []metav1.Condition
			SetConditions(&conds, &c.obs)
			if got := Phase(&c.obs); got != c.phase {
				t.Errorf("phase %s, want %s", got, c.phase)
			}
			for typ, want := range map[string]cond{rcv1.ConditionReady: c.ready, rcv1.ConditionPlaced: c.placedC, rcv1.ConditionDegraded: c.degraded, rcv1.ConditionFlushed: c.flushed} {
				got := meta.FindStatusCondition(conds, typ)
				if got == nil || got.Status != want.status || got.Reason != want.reason || got.ObservedGeneration != 7 {
					t.Errorf("%s = %+v, want %s/%s generation 7", typ, got, want.status, want.reason)
				}
			}
			if c.msg != "" {
				found := false
				for _, cd := range conds {
					found = found || strings.Contains(cd.Message, c.msg)
				}
				if !found {
					t.Errorf("no condition message mentions %q: %+v", c.msg, conds)
				}
			}
		})
	}
}
