package dashboard

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// Event is one row of the recent Events.
type Event struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Kind    string    `json:"kind"`
	Name    string    `json:"name"`
	Count   int32     `json:"count"`
}

// eventKinds are the kinds whose Events the page shows.
var eventKinds = []string{"CachePool", "CachedVolume"}

// Listing is paged and capped: Events expire (an hour by default), but a
// flapping server can still leave many, and the page needs only the newest.
const (
	eventsPageSize = 250
	eventsMaxPages = 8
)

// listEvents reads the newest Events about CachePools and CachedVolumes.
// Recorders put the Events of cluster-scoped objects in "default"; the
// apiserver filters by kind, so only ours are transferred.
func (d *Dashboard) listEvents(ctx context.Context) ([]Event, error) {
	var all []corev1.Event
	for _, kind := range eventKinds {
		opts := []client.ListOption{
			client.InNamespace(metav1.NamespaceDefault),
			client.MatchingFields{"involvedObject.kind": kind},
			client.Limit(eventsPageSize),
		}
		for page := 0; page < eventsMaxPages; page++ {
			var list corev1.EventList
			if err := d.events.List(ctx, &list, opts...); err != nil {
				return nil, fmt.Errorf("list %s events: %w", kind, err)
			}
			all = append(all, list.Items...)
			if list.Continue == "" {
				break
			}
			opts = append(opts[:3:3], client.Continue(list.Continue))
		}
	}
	return recentEvents(all, d.opts.MaxEvents), nil
}

// recentEvents keeps the Events about our API group's kinds (another
// group may have a kind of the same name), newest first, at most limit.
func recentEvents(items []corev1.Event, limit int) []Event {
	ours := map[string]bool{}
	for _, k := range eventKinds {
		ours[k] = true
	}
	out := make([]Event, 0, len(items))
	for i := range items {
		e := &items[i]
		gv, err := schema.ParseGroupVersion(e.InvolvedObject.APIVersion)
		if err != nil || gv.Group != rcv1.GroupVersion.Group || !ours[e.InvolvedObject.Kind] {
			continue
		}
		count := e.Count
		if e.Series != nil && e.Series.Count > count {
			count = e.Series.Count
		}
		out = append(out, Event{
			Time:    lastSeen(e).UTC(),
			Type:    e.Type,
			Reason:  e.Reason,
			Message: e.Message,
			Kind:    e.InvolvedObject.Kind,
			Name:    e.InvolvedObject.Name,
			Count:   max(count, 1),
		})
	}
	// Ties (same second) fall back to the name so the order is stable.
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Time.Equal(out[j].Time) {
			return out[i].Time.After(out[j].Time)
		}
		return out[i].Kind+"/"+out[i].Name < out[j].Kind+"/"+out[j].Name
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// lastSeen is when an Event last happened: core/v1 recorders set
// LastTimestamp, events.k8s.io ones EventTime and then Series. The
// object's creation time is only a fallback: it says when the Event was
// stored, which for a reported (or replayed) Event can be later.
func lastSeen(e *corev1.Event) time.Time {
	var t time.Time
	for _, c := range []time.Time{e.FirstTimestamp.Time, e.LastTimestamp.Time, e.EventTime.Time} {
		if c.After(t) {
			t = c
		}
	}
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	if t.IsZero() {
		return e.CreationTimestamp.Time
	}
	return t
}
