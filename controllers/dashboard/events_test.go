package dashboard

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func event(name, apiVersion, kind, obj, reason string, last time.Time) corev1.Event {
	return corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{APIVersion: apiVersion, Kind: kind, Name: obj},
		Reason:         reason,
		Message:        reason + " message",
		Type:           corev1.EventTypeNormal,
		LastTimestamp:  metav1.NewTime(last),
		Count:          1,
	}
}

func TestRecentEvents(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	ours := "rackcache.io/v1alpha1"
	series := event("e-series", ours, "CachedVolume", "v1", "Series", t0)
	series.Series = &corev1.EventSeries{Count: 7, LastObservedTime: metav1.NewMicroTime(t0.Add(5 * time.Minute))}
	newAPI := event("e-new-api", ours, "CachePool", "p1", "NewAPI", time.Time{})
	newAPI.EventTime = metav1.NewMicroTime(t0.Add(3 * time.Minute))
	// Stored later than it happened: the time it happened counts.
	stored := event("e-stored", ours, "CachePool", "p2", "Stored", t0.Add(-time.Minute))
	stored.CreationTimestamp = metav1.NewTime(t0.Add(time.Hour))
	// No time but its creation: that is the best there is.
	bare := event("e-bare", ours, "CachePool", "p3", "Bare", time.Time{})
	bare.CreationTimestamp = metav1.NewTime(t0.Add(2 * time.Minute))
	items := []corev1.Event{
		stored,
		bare,
		event("e-old", ours, "CachePool", "p1", "Old", t0),
		event("e-pod", "v1", "Pod", "p1", "Pod", t0.Add(9*time.Minute)),
		event("e-other-group", "example.com/v1", "CachePool", "p1", "OtherGroup", t0.Add(9*time.Minute)),
		event("e-mid", ours, "CachedVolume", "v2", "Mid", t0.Add(time.Minute)),
		series,
		newAPI,
	}
	got := recentEvents(items, 10)
	want := []struct {
		reason string
		count  int32
		at     time.Time
	}{
		{"Series", 7, t0.Add(5 * time.Minute)},
		{"NewAPI", 1, t0.Add(3 * time.Minute)},
		{"Bare", 1, t0.Add(2 * time.Minute)},
		{"Mid", 1, t0.Add(time.Minute)},
		{"Old", 1, t0},
		{"Stored", 1, t0.Add(-time.Minute)},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d events %+v, want %d (other kinds and groups left out)", len(got), got, len(want))
	}
	for i, w := range want {
		if got[i].Reason != w.reason || got[i].Count != w.count || !got[i].Time.Equal(w.at) {
			t.Errorf("event %d = %s count %d at %v, want %s count %d at %v",
				i, got[i].Reason, got[i].Count, got[i].Time, w.reason, w.count, w.at)
		}
	}
	if got[0].Kind != "CachedVolume" || got[0].Name != "v1" || got[0].Message != "Series message" {
		t.Errorf("newest event = %+v", got[0])
	}
	if limited := recentEvents(items, 2); len(limited) != 2 || limited[0].Reason != "Series" || limited[1].Reason != "NewAPI" {
		t.Errorf("limit 2 kept %+v, want the two newest", limited)
	}
}
