package dashboard

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// Start samples until ctx ends (manager.Runnable): volume statistics into
// the history, and the recent Events. Sampling here rather than per page
// request keeps the apiserver's load (the Events list) the same however
// many browsers poll.
func (d *Dashboard) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("dashboard")
	tick := time.NewTicker(d.opts.SamplePeriod)
	defer tick.Stop()
	for {
		d.sampleOnce(ctx, logger)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// NeedLeaderElection is false: the page is read-only, and a replica that
// is not the leader serves it too, so it must keep its own history.
func (d *Dashboard) NeedLeaderElection() bool { return false }

// sampleOnce takes one sample and refreshes the Events. A failed read
// keeps what was there: a gap in the charts is better than a false zero.
func (d *Dashboard) sampleOnce(ctx context.Context, logger logr.Logger) {
	var volumes rcv1.CachedVolumeList
	if err := d.objects.List(ctx, &volumes); err != nil {
		if ctx.Err() == nil {
			logger.Error(err, "cannot list cached volumes for the dashboard's history")
		}
	} else {
		s := takeSample(d.now(), volumes.Items)
		d.mu.Lock()
		d.history.push(s)
		d.mu.Unlock()
	}

	events, err := d.listEvents(ctx)
	if err != nil && ctx.Err() != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		// Logged once per distinct error (a missing RBAC rule would
		// otherwise log every period); the page shows it too.
		if err.Error() != d.eventsErr {
			logger.Error(err, "cannot list events for the dashboard")
		}
		d.eventsErr = err.Error()
		return
	}
	d.recent, d.eventsErr = events, ""
}

// snapshot returns the sampled history and Events.
func (d *Dashboard) snapshot() (history []Sample, events []Event, eventsErr string) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.history.items(), append([]Event(nil), d.recent...), d.eventsErr
}
