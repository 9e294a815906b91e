// Package dashboard is the operator's built-in, read-only web page: pools,
// their servers, volumes, recent Events, and charts of hit ratio, I/O volume
// and dirty bytes over time. It is served at Path by a plain HTTP server of
// its own (server.go), on the loopback address by default: the page names
// every volume, so it is reached through `kubectl port-forward`, which the
// API server authenticates and authorizes. Every replica serves it, leader
// or not.
package dashboard

import (
	"fmt"
	"sync"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The page lists recent Events about CachePools and CachedVolumes. Both
// kinds are cluster-scoped, so their Events live in the "default"
// namespace, which is outside the operator's own; they are listed straight
// from the apiserver a few at a time rather than watched, so no informer
// (and no watch permission) is needed for them.
//
// +kubebuilder:rbac:groups="",resources=events,verbs=list

// Path is where the dashboard is mounted; the handler serves the subtree.
const Path = "/dashboard/"

// Options are the dashboard's settings.
type Options struct {
	// SamplePeriod is how often volume statistics and Events are read.
	SamplePeriod time.Duration
	// HistorySize is how many samples the charts keep (the oldest go first).
	HistorySize int
	// MaxEvents is how many Events the page lists, newest first.
	MaxEvents int
}

// DefaultOptions are the settings cmd/operator starts with: an hour of
// history at one sample every 10 s.
func DefaultOptions() Options {
	return Options{SamplePeriod: 10 * time.Second, HistorySize: 360, MaxEvents: 20}
}

// withDefaults fills unset fields, so callers may set only what they change.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.SamplePeriod <= 0 {
		o.SamplePeriod = d.SamplePeriod
	}
	if o.HistorySize <= 0 {
		o.HistorySize = d.HistorySize
	}
	if o.MaxEvents <= 0 {
		o.MaxEvents = d.MaxEvents
	}
	return o
}

// Dashboard is both the http.Handler of the page and the manager.Runnable
// that samples the history the charts draw.
type Dashboard struct {
	// objects reads CachePools and CachedVolumes (the manager's cache).
	objects client.Reader
	// events reads Events from the apiserver (the manager's API reader).
	events client.Reader
	opts   Options
	// now is the clock, injected so tests control sample times.
	now func() time.Time

	mu        sync.RWMutex
	history   *ring[Sample]
	recent    []Event
	eventsErr string
}

// New returns a dashboard reading objects from objects and Events from
// events; it serves nothing but the objects until Start samples.
func New(objects, events client.Reader, o Options) *Dashboard {
	o = o.withDefaults()
	return &Dashboard{
		objects: objects,
		events:  events,
		opts:    o,
		now:     time.Now,
		history: newRing[Sample](o.HistorySize),
	}
}

// Setup adds the dashboard to mgr: its sampler, and its page served on
// addr. It needs the manager's clients, which exist only once the manager
// does.
func Setup(mgr ctrl.Manager, o Options, addr string) (*Dashboard, error) {
	d := New(mgr.GetClient(), mgr.GetAPIReader(), o)
	if err := mgr.Add(d); err != nil {
		return nil, fmt.Errorf("add the dashboard sampler: %w", err)
	}
	if err := mgr.Add(&server{addr: addr, handler: d}); err != nil {
		return nil, fmt.Errorf("add the dashboard server: %w", err)
	}
	return d, nil
}
