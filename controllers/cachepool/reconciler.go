// Package cachepool reconciles CachePools: the dataplane DaemonSet and its
// credentials, and each server's state read over JSON-RPC.
package cachepool

import (
	"context"
	"time"

	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/servers"
)

// Reconciler reconciles CachePools. (Placeholder until the reconciler lands.)
type Reconciler struct {
	Client    client.Client
	Namespace string
	Connector *servers.Connector
	Recorder  record.EventRecorder
	// StatusInterval is how often servers are read again.
	StatusInterval time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Reconcile does one pass over a CachePool.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return ctrl.Result{}, nil
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&rcv1.CachePool{}).Complete(r)
}
