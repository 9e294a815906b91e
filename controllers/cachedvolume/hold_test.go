package cachedvolume

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dataplane"
)

func TestWriteThroughHold(t *testing.T) {
	now := time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)
	vol := func(v string) *rcv1.CachedVolume {
		return &rcv1.CachedVolume{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{rcv1.WriteThroughHoldAnnotation: v}}}
	}
	cases := []struct {
		name, value, mode, wantToken, wantMode string
	}{
		{"active hold on write-back", HoldValue("s1", now.Add(time.Minute)), dataplane.WriteBack, "s1", dataplane.WriteThrough},
		{"expired", HoldValue("s1", now.Add(-time.Second)), dataplane.WriteBack, "", dataplane.WriteBack},
		{"malformed", "s1", dataplane.WriteBack, "", dataplane.WriteBack},
		{"bad time", "s1@tomorrow", dataplane.WriteBack, "", dataplane.WriteBack},
		{"not write-back", HoldValue("s1", now.Add(time.Minute)), dataplane.WriteAround, "", dataplane.WriteAround},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Desired{Cached: dataplane.CachedBdevParams{WriteMode: c.mode}}
			if got := applyHold(&d, vol(c.value), now); got != c.wantToken || d.Cached.WriteMode != c.wantMode {
				t.Errorf("applyHold = %q, mode %s; want %q, %s", got, d.Cached.WriteMode, c.wantToken, c.wantMode)
			}
		})
	}
}
