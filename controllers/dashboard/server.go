package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

// server serves the page on its own address, as a manager runnable that
// every replica runs (not only the leader).
type server struct {
	addr    string
	handler http.Handler
}

// NeedLeaderElection is false: followers serve the page too.
func (s *server) NeedLeaderElection() bool { return false }

// Start listens on s.addr and serves Path until ctx ends.
func (s *server) Start(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.Handle(Path, s.handler)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
	}
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("dashboard: listen on %s: %w", s.addr, err)
	}
	ctrl.LoggerFrom(ctx).WithName("dashboard").Info("serving the dashboard", "address", "http://"+l.Addr().String()+Path)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return fmt.Errorf("dashboard: serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("dashboard: shut down: %w", err)
	}
	return nil
}
