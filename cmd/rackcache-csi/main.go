// Command rackcache-csi is the CSI driver csi.rackcache.io: the
// controller (--mode controller) provisions cached RBD volumes through
// CachedVolumes; the node plugin (--mode node) attaches them with the
// kernel's NVMe/TCP initiator.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/rackcache/rackcache/csi"
)

// version is set at build time (-ldflags -X main.version=...).
var version = "dev"

func main() {
	// A flag set of its own: controller-runtime defines --kubeconfig on
	// the global one.
	cfg, err := parseFlags(flag.NewFlagSet("rackcache-csi", flag.ExitOnError), os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "rackcache-csi:", err)
		os.Exit(2)
	}
	log := zap.New(zap.UseFlagOptions(&cfg.zap))
	ctrl.SetLogger(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(logr.NewContext(ctx, log), cfg, log); err != nil {
		log.Error(err, "rackcache-csi stopped")
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg *config, log logr.Logger) error {
	var ctrlOpts csi.ControllerOptions
	var nodeOpts csi.NodeOptions
	var pathsChanged <-chan struct{}
	var ready []func(context.Context) error
	if cfg.mode != csi.ModeNode {
		opts, check, err := controllerOptions(cfg)
		if err != nil {
			return err
		}
		ctrlOpts = opts
		ready = append(ready, check)
	}
	if cfg.mode != csi.ModeController {
		opts, check, err := nodeOptions(ctx, cfg)
		if err != nil {
			return err
		}
		volumes, changed, err := volumeWatch(ctx, cfg)
		if err != nil {
			return err
		}
		if volumes != nil {
			opts.Volumes, pathsChanged = volumes, changed
		}
		nodeOpts = opts
		ready = append(ready, check)
	}
	driver, err := csi.NewDriver(cfg.mode, version, cfg.rackLabel, ctrlOpts, nodeOpts, func(ctx context.Context) error {
		for _, check := range ready {
			if err := check(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	lis, err := csi.Listen(cfg.endpoint)
	if err != nil {
		return err
	}
	srv := csi.NewServer(driver, log)
	errs := make(chan error, 4)
	go func() { errs <- srv.Serve(lis) }()
	log.Info("serving", "driver", csi.DriverName, "version", version, "mode", cfg.mode, "endpoint", cfg.endpoint)

	if cfg.probeListen != "" {
		go func() { errs <- serveProbe(ctx, cfg.probeListen, driver) }()
	}
	if cfg.mode != csi.ModeController && cfg.registrationDir != "" {
		go func() { errs <- register(ctx, cfg) }()
	}
	if cfg.mode != csi.ModeController {
		go func() {
			if err := followPaths(ctx, cfg, driver, nodeOpts, pathsChanged); err != nil {
				errs <- err
			}
		}()
	}
	select {
	case <-ctx.Done():
		log.Info("signal: stopping")
	case err = <-errs:
	}
	stopServer(srv)
	return err
}

// stopServer lets calls in flight finish (a stage half done would leave a
// connection behind), for at most 30 s.
func stopServer(srv *grpc.Server) {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		srv.Stop()
	}
}

// serveProbe answers /healthz with the CSI Probe's verdict.
func serveProbe(ctx context.Context, addr string, d *csi.Driver) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		resp, err := d.Probe(r.Context(), nil)
		if err != nil || !resp.GetReady().GetValue() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("probe server on %s: %w", addr, err)
	}
	return nil
}
