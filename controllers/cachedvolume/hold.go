package cachedvolume

import (
	"strings"
	"time"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dataplane"
)

// A write-through hold (rackcache.io/write-through-hold, set by the CSI
// driver around a snapshot) runs a write-back volume write-through for a
// while: every write acknowledged during the hold is in Ceph when
// acknowledged, so an RBD snapshot taken then holds a prefix of the
// writes (crash-consistent), which cleaning's out-of-order write-back
// cannot promise.

// HoldValue is the annotation's value for token until deadline.
func HoldValue(token string, until time.Time) string {
	return token + "@" + until.UTC().Format(time.RFC3339)
}

// activeHold returns the hold's token when vol carries one that has not
// expired at now ("" otherwise, also for a malformed value).
func activeHold(vol *rcv1.CachedVolume, now time.Time) string {
	v := vol.Annotations[rcv1.WriteThroughHoldAnnotation]
	token, until, ok := strings.Cut(v, "@")
	if !ok || token == "" {
		return ""
	}
	t, err := time.Parse(time.RFC3339, until)
	if err != nil || !now.Before(t) {
		return ""
	}
	return token
}

// applyHold makes a write-back volume's desired mode write-through while
// a hold is active, returning the hold's token ("" when none applies).
func applyHold(d *Desired, vol *rcv1.CachedVolume, now time.Time) string {
	token := activeHold(vol, now)
	if token == "" || d.Cached.WriteMode != dataplane.WriteBack {
		return ""
	}
	d.Cached.WriteMode = dataplane.WriteThrough
	return token
}
