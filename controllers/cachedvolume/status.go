package cachedvolume

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// Observation is what one pass learned; conditions and phase are derived
// from it alone, every pass.
type Observation struct {
	Generation int64
	// Now stamps conditions that change (the reconciler's clock, so the
	// lost-server grace measured from them follows it too).
	Now      time.Time
	Deleting bool
	// DeleteBlocked says why deletion waits (e.g. dirty data on a lost server).
	DeleteBlocked string
	PoolMissing   bool
	CephError     string
	// NoCapacity is placement's refusal ("" when placed or not tried).
	NoCapacity string
	// Placed: status.server names the volume's server.
	Placed        bool
	PlacedReason  string
	PlacedMessage string
	// Lost is the lost-server decision (nil when not made).
	Lost *LostDecision
	// LostServer names the lost server.
	LostServer string
	// DataplaneError is a refused or failed dataplane call.
	DataplaneError string
	// Applied: the dataplane holds everything the volume needs.
	Applied bool
	// Flushing: dirty data is being written to Ceph.
	Flushing bool
	// FlushDirty is what is left to write.
	FlushDirty uint64
	// FlushError is the last flush's failure.
	FlushError string
	// CacheDegraded: the cached bdev reports its cache device failed.
	CacheDegraded bool
	// CacheDamaged is the dataplane's refusal to load the volume's cache
	// because its metadata is damaged (names the device, the units and the
	// dirty bytes at risk); "" otherwise.
	CacheDamaged string
	// DamagedDirtyBytes are write-back bytes that failed their checksum on
	// the cache device (served as media errors, never flushed).
	DamagedDirtyBytes uint64
	// CacheDevice names the volume's cache device on its server.
	CacheDevice string
	// Mirror is what the pass learned of the volume's mirror (nil: the
	// pass did not get that far; condition Mirrored stays as it was).
	Mirror *MirrorObservation
}

func (o *Observation) lost() bool { return o.Lost != nil && o.Lost.Action != ServerHealthy }

// SetConditions writes the four conditions of o onto conds, and
// Mirrored when the pass looked at the mirror.
func SetConditions(conds *[]metav1.Condition, o *Observation) {
	for _, c := range []struct {
		typ  string
		eval func(*Observation) (metav1.ConditionStatus, string, string)
	}{
		{rcv1.ConditionPlaced, placedCondition},
		{rcv1.ConditionReady, readyCondition},
		{rcv1.ConditionDegraded, degradedCondition},
		{rcv1.ConditionFlushed, flushedCondition},
	} {
		status, reason, msg := c.eval(o)
		// The grace of a lost server counts from Ready's LastTransitionTime,
		// which SetStatusCondition keeps when only the reason changes: a
		// volume already Ready=False (Ceph, dataplane error) would start its
		// grace in the past. Becoming lost restarts the clock.
		if old := meta.FindStatusCondition(*conds, c.typ); old != nil && reason == rcv1.ReasonServerLost && old.Reason != reason {
			meta.RemoveStatusCondition(conds, c.typ)
		}
		meta.SetStatusCondition(conds, metav1.Condition{Type: c.typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: o.Generation, LastTransitionTime: metav1.NewTime(o.Now)})
	}
	if m := o.Mirror; m != nil {
		// As for a lost server: the mirror's grace counts from when it
		// was first found lost.
		if old := meta.FindStatusCondition(*conds, rcv1.ConditionMirrored); old != nil && m.Reason == rcv1.ReasonMirrorLost && old.Reason != m.Reason {
			meta.RemoveStatusCondition(conds, rcv1.ConditionMirrored)
		}
		meta.SetStatusCondition(conds, metav1.Condition{Type: rcv1.ConditionMirrored, Status: m.Status, Reason: m.Reason, Message: m.Message, ObservedGeneration: o.Generation, LastTransitionTime: metav1.NewTime(o.Now)})
	}
}

func placedCondition(o *Observation) (metav1.ConditionStatus, string, string) {
	switch {
	case o.PoolMissing:
		return metav1.ConditionFalse, rcv1.ReasonPoolNotFound, "the volume's CachePool does not exist"
	case o.NoCapacity != "":
		return metav1.ConditionFalse, rcv1.ReasonNoCapacity, o.NoCapacity
	case o.Placed:
		return metav1.ConditionTrue, o.PlacedReason, o.PlacedMessage
	default:
		return metav1.ConditionUnknown, rcv1.ReasonUnknown, "placement has not run yet"
	}
}

func readyCondition(o *Observation) (metav1.ConditionStatus, string, string) {
	switch {
	case o.Deleting:
		msg := "the volume is being deleted"
		if o.DeleteBlocked != "" {
			msg = o.DeleteBlocked
		}
		return metav1.ConditionFalse, rcv1.ReasonDeleting, msg
	case o.PoolMissing:
		return metav1.ConditionFalse, rcv1.ReasonPoolNotFound, "the volume's CachePool does not exist"
	case o.lost():
		return metav1.ConditionFalse, rcv1.ReasonServerLost, fmt.Sprintf("cache server %s is lost: %s", o.LostServer, o.Lost.Why)
	case o.CephError != "":
		return metav1.ConditionFalse, rcv1.ReasonCephUnavailable, o.CephError
	case o.NoCapacity != "":
		return metav1.ConditionFalse, rcv1.ReasonNoCapacity, o.NoCapacity
	case o.DataplaneError != "":
		return metav1.ConditionFalse, rcv1.ReasonDataplaneError, o.DataplaneError
	case o.Applied:
		return metav1.ConditionTrue, rcv1.ReasonAsExpected, "hosts can connect"
	default:
		return metav1.ConditionUnknown, rcv1.ReasonUnknown, "the dataplane has not been configured yet"
	}
}

func degradedCondition(o *Observation) (metav1.ConditionStatus, string, string) {
	switch {
	case o.Lost != nil && o.Lost.Action == LostDegrade:
		return metav1.ConditionTrue, rcv1.ReasonDirtyDataOnLostServer, fmt.Sprintf(
			"the volume's dirty data (write-back) is on cache server %s, which is lost (%s); it is not re-placed, "+
				"as Ceph lacks that data. Recover by bringing %s back (its dataplane reattaches the cache and the volume "+
				"is served again), or accept the loss: delete the volume with annotation %s=\"true\"",
			o.LostServer, o.Lost.Why, o.LostServer, DiscardDirtyDataAnnotation)
	case o.lost():
		return metav1.ConditionTrue, rcv1.ReasonServerLost, fmt.Sprintf("cache server %s is lost: %s", o.LostServer, o.Lost.Why)
	case o.CacheDamaged != "":
		return metav1.ConditionTrue, rcv1.ReasonCacheMetadataDamaged, "the volume's cache cannot be vouched for, so it is not served: " +
			o.CacheDamaged + ". Acknowledged write-back data may be lost; accept the loss by deleting the volume with annotation " +
			DiscardDirtyDataAnnotation + "=\"true\" (see docs/operator.md, \"What a lost cache leaves in Ceph\")"
	case o.DamagedDirtyBytes > 0:
		return metav1.ConditionTrue, rcv1.ReasonDirtyDataDamaged, fmt.Sprintf(
			"%d bytes of the volume's write-back data failed their checksum on cache device %s (bit rot): hosts get a media error "+
				"on them and they are never written to Ceph; the rest is served. The flush error names the ranges; the damage ends "+
				"when the host rewrites or discards each range whole (see docs/cache-format.md, \"Checksums of dirty data\")",
			o.DamagedDirtyBytes, o.CacheDevice)
	case o.CacheDegraded:
		return metav1.ConditionTrue, rcv1.ReasonDataplaneError, "the cache device failed; the dataplane serves the volume from Ceph"
	default:
		return metav1.ConditionFalse, rcv1.ReasonAsExpected, ""
	}
}

func flushedCondition(o *Observation) (metav1.ConditionStatus, string, string) {
	switch {
	case o.FlushError != "":
		return metav1.ConditionFalse, rcv1.ReasonFlushFailed, "writing dirty data to Ceph failed (retrying): " + o.FlushError
	case o.Flushing:
		return metav1.ConditionFalse, rcv1.ReasonFlushing, fmt.Sprintf("writing dirty data to Ceph, %d bytes left", o.FlushDirty)
	case o.Applied || (o.Deleting && o.DeleteBlocked == ""):
		return metav1.ConditionTrue, rcv1.ReasonAsExpected, ""
	default:
		return metav1.ConditionUnknown, rcv1.ReasonUnknown, "the dataplane was not read"
	}
}

// Phase summarises o.
func Phase(o *Observation) rcv1.CachedVolumePhase {
	switch {
	case o.Deleting:
		return rcv1.VolumeDeleting
	case o.lost() || o.CacheDegraded || o.CacheDamaged != "" || o.DamagedDirtyBytes > 0:
		return rcv1.VolumeDegraded
	case o.Flushing || o.FlushError != "":
		return rcv1.VolumeFlushing
	case !o.Placed:
		return rcv1.VolumePending
	case o.Applied:
		return rcv1.VolumeReady
	default:
		return rcv1.VolumePlacing
	}
}
