// Command rackcache-operator runs the CachePool and CachedVolume reconcilers
// (controllers/operator) in a controller-runtime manager.
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dashboard"
	"github.com/rackcache/rackcache/controllers/operator"
)

// leaderElectionID names the Lease the replicas compete for.
const leaderElectionID = "rackcache-operator.rackcache.io"

func main() {
	cfg, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&cfg.zap)))
	if err := run(cfg); err != nil {
		ctrl.Log.WithName("setup").Error(err, "operator stopped")
		os.Exit(1)
	}
}

func run(cfg *config) error {
	log := ctrl.Log.WithName("setup")
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(rcv1.AddToScheme(scheme))

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  scheme,
		Cache:                   operator.CacheOptions(cfg.operator.Namespace),
		Client:                  operator.ClientOptions(),
		Metrics:                 operator.MetricsOptions(cfg.metricsAddr, cfg.metricsSecure, cfg.metricsCertDir),
		HealthProbeBindAddress:  cfg.probeAddr,
		LeaderElection:          cfg.leaderElect,
		LeaderElectionID:        leaderElectionID,
		LeaderElectionNamespace: cfg.operator.Namespace,
		// On SIGTERM (a rollout) the leader hands its Lease back at once
		// instead of letting the next replica wait for it to expire; safe
		// because the process exits as soon as the manager has stopped.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	if err := operator.Setup(mgr, cfg.operator); err != nil {
		return err
	}
	if cfg.dashboardAddr != "0" {
		if _, err := dashboard.Setup(mgr, cfg.dashboard, cfg.dashboardAddr); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("add ready check: %w", err)
	}
	log.Info("starting operator", "namespace", cfg.operator.Namespace, "leaderElect", cfg.leaderElect,
		"metrics", cfg.metricsAddr, "metricsSecure", cfg.metricsSecure, "dashboard", cfg.dashboardAddr, "probes", cfg.probeAddr, "statusInterval", cfg.operator.StatusInterval,
		"serverLostGrace", cfg.operator.ServerLostGrace, "dataplaneTimeout", cfg.operator.DataplaneTimeout)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return fmt.Errorf("run manager: %w", err)
	}
	return nil
}
