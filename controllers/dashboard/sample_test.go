package dashboard

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

func TestParseHitRatio(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"93.5%", 93.5, true},
		{"0.0%", 0, true},
		{"100.0%", 100, true},
		{" 42% ", 42, true},
		{"", 0, false},
		{"93.5", 0, false},
		{"abc%", 0, false},
		{"-1%", 0, false},
		{"100.1%", 0, false},
		{"NaN%", 0, false},
	} {
		got, ok := parseHitRatio(tc.in)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseHitRatio(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func cachedVolume(name, pool, hitRatio string, dirty string, read, written int64) rcv1.CachedVolume {
	v := rcv1.CachedVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: rcv1.CachedVolumeSpec{PoolName: pool}}
	v.Status.Stats = rcv1.VolumeStats{HitRatio: hitRatio, ReadBytes: read, WrittenBytes: written}
	if dirty != "" {
		q := resource.MustParse(dirty)
		v.Status.Stats.Dirty = &q
	}
	return v
}

func TestTakeSample(t *testing.T) {
	at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.FixedZone("x", 3600))
	s := takeSample(at, []rcv1.CachedVolume{
		cachedVolume("a", "p", "93.5%", "1Mi", 1000, 10),
		cachedVolume("b", "p", "", "", 24, 5),
	})
	if !s.Time.Equal(at) || s.Time.Location() != time.UTC {
		t.Errorf("time = %v, want %v in UTC", s.Time, at)
	}
	if s.ReadBytes != 1024 || s.WrittenBytes != 15 || s.DirtyBytes != 1<<20 {
		t.Errorf("totals read %d written %d dirty %d, want 1024, 15, %d", s.ReadBytes, s.WrittenBytes, s.DirtyBytes, 1<<20)
	}
	a := s.Volumes["a"]
	if a.HitRatio == nil || *a.HitRatio != 93.5 || a.DirtyBytes != 1<<20 || a.ReadBytes != 1000 || a.WrittenBytes != 10 {
		t.Errorf("volume a = %+v", a)
	}
	// No hit ratio in the status is a gap, not a zero.
	if b := s.Volumes["b"]; b.HitRatio != nil || b.DirtyBytes != 0 {
		t.Errorf("volume b = %+v, want no hit ratio and no dirty bytes", b)
	}
}
