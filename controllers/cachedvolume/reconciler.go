// Package cachedvolume reconciles CachedVolumes: placement on a cache
// server, the volume's objects on that server's dataplane, and teardown.
package cachedvolume

import (
	"context"
	"time"

	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/servers"
)

// Reconciler reconciles CachedVolumes. (Placeholder until the reconciler lands.)
type Reconciler struct {
	Client    client.Client
	Namespace string
	Connector *servers.Connector
	Recorder  record.EventRecorder
	// ServerLostGrace is how long a server may be unreachable before its
	// write-through and write-around volumes are re-placed.
	ServerLostGrace time.Duration
	// StatsInterval is how often a volume's statistics are read again.
	StatsInterval time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Reconcile does one pass over a CachedVolume.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return ctrl.Result{}, nil
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&rcv1.CachedVolume{}).Complete(r)
}
