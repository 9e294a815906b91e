// Package operator wires the reconcilers into a controller-runtime manager;
// cmd/operator and the envtest suites both start the operator through it.
package operator

import (
	"fmt"
	"net"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/cachedvolume"
	"github.com/rackcache/rackcache/controllers/cachepool"
	"github.com/rackcache/rackcache/controllers/leases"
	"github.com/rackcache/rackcache/controllers/servers"
)

// Options are the operator's settings.
type Options struct {
	// Namespace holds the dataplane DaemonSets, Secrets and ConfigMaps.
	Namespace string
	// StatusInterval is how often each server's state is read.
	StatusInterval time.Duration
	// ServerLostGrace is how long a server may be unreachable before its
	// write-through and write-around volumes are re-placed.
	ServerLostGrace time.Duration
	// DataplaneTimeout bounds each JSON-RPC call to a dataplane.
	DataplaneTimeout time.Duration
	// RPCPort is the dataplanes' JSON-RPC port (servers.RPCPort when zero).
	RPCPort int
	// Admission limits the device paths and images a CachePool may name.
	Admission cachepool.Admission
	// ServiceAccount is the operator's own ServiceAccount (in Namespace):
	// it mints the dataplanes' RPC tokens for it, and the dataplanes let
	// in no one else.
	ServiceAccount string
	// DataplaneAPI ("host:port"), when set, is where the dataplane pods
	// reach the API server to review tokens (clusters without a service
	// proxy); else the kubelet's in-cluster address.
	DataplaneAPI string
}

// DefaultOptions are the settings cmd/operator starts with.
func DefaultOptions() Options {
	return Options{
		Namespace:        "rackcache-system",
		StatusInterval:   30 * time.Second,
		ServerLostGrace:  5 * time.Minute,
		DataplaneTimeout: 30 * time.Second,
		Admission:        cachepool.DefaultAdmission(),
		ServiceAccount:   servers.OperatorServiceAccount,
	}
}

// Setup registers the CachePool and CachedVolume reconcilers with mgr.
func Setup(mgr ctrl.Manager, o Options) error {
	if o.ServiceAccount == "" {
		return fmt.Errorf("the operator's ServiceAccount is not set: the dataplanes would let no one in")
	}
	tokens := &servers.Tokens{Client: mgr.GetClient(), Namespace: o.Namespace, ServiceAccount: o.ServiceAccount}
	conn := &servers.Connector{Reader: mgr.GetClient(), Tokens: tokens, Namespace: o.Namespace, Timeout: o.DataplaneTimeout, Port: o.RPCPort}
	access := cachepool.ServerAccess{Caller: tokens.Caller()}
	if o.DataplaneAPI != "" {
		host, port, err := net.SplitHostPort(o.DataplaneAPI)
		if err != nil {
			return fmt.Errorf("the dataplanes' API server address %q: %w", o.DataplaneAPI, err)
		}
		access.APIHost, access.APIPort = host, port
	}
	pools := &cachepool.Reconciler{
		Client:         mgr.GetClient(),
		Namespace:      o.Namespace,
		Connector:      conn,
		Recorder:       mgr.GetEventRecorderFor("cachepool-controller"),
		StatusInterval: o.StatusInterval,
		Admission:      &o.Admission,
		ServerAccess:   access,
	}
	if err := pools.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the CachePool reconciler: %w", err)
	}
	// Servers of pools with mirrored volumes hold a lease the operator
	// renews; a lost owner's mirror is promoted once that lease ran out.
	unanswered := make(chan event.GenericEvent, 64)
	renewer := &leases.Renewer{Client: mgr.GetClient(), Dial: conn.Client, Duration: leaseDuration, Unanswered: unanswered}
	if err := mgr.Add(renewer); err != nil {
		return fmt.Errorf("add the lease renewer: %w", err)
	}
	volumes := &cachedvolume.Reconciler{
		Client:          mgr.GetClient(),
		Namespace:       o.Namespace,
		Connector:       conn,
		Recorder:        mgr.GetEventRecorderFor("cachedvolume-controller"),
		ServerLostGrace: o.ServerLostGrace,
		StatsInterval:   o.StatusInterval,
		APIReader:       mgr.GetAPIReader(),
		Leases:          renewer,
		LeaseEvents:     unanswered,
	}
	if err := volumes.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the CachedVolume reconciler: %w", err)
	}
	return nil
}

// leaseDuration is the lease of a pool's servers: the failover grace, for
// pools whose volumes have mirrors; none otherwise.
func leaseDuration(pool *rcv1.CachePool) time.Duration {
	if cachedvolume.EffectiveReplicas(pool) < 2 {
		return 0
	}
	return cachedvolume.FailoverGrace(pool)
}
