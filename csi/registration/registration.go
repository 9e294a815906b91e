// Package registration registers the node plugin with the kubelet
// (pluginregistration/v1), as node-driver-registrar would: that sidecar
// cannot be built here, so the driver serves the registration socket
// itself. Deployments that run the upstream sidecar turn this off.
package registration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// SocketName is the registration socket's name for driver in the
// kubelet's plugins_registry directory.
func SocketName(driver string) string { return driver + "-reg.sock" }

// server answers the kubelet's plugin watcher.
type server struct {
	registerapi.UnimplementedRegistrationServer
	info    *registerapi.PluginInfo
	log     logr.Logger
	failure chan error
}

// GetInfo tells the kubelet what the plugin is and where its endpoint is.
func (s *server) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return s.info, nil
}

// NotifyRegistrationStatus receives the kubelet's verdict. A refusal ends
// Serve with an error: like node-driver-registrar, the plugin then exits
// and is restarted rather than running unregistered.
func (s *server) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if st.PluginRegistered {
		s.log.Info("registered with the kubelet", "driver", s.info.Name, "endpoint", s.info.Endpoint)
		return &registerapi.RegistrationStatusResponse{}, nil
	}
	err := fmt.Errorf("the kubelet refused plugin %s: %s", s.info.Name, st.Error)
	select {
	case s.failure <- err:
	default:
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Serve serves the registration socket in dir until ctx ends or the
// kubelet refuses the plugin. endpoint is the CSI socket's path as the
// kubelet sees it. A stale socket is removed first; the socket is removed
// on return.
func Serve(ctx context.Context, dir, driver, endpoint string, versions []string) error {
	log := logr.FromContextOrDiscard(ctx).WithName("registration")
	path := filepath.Join(dir, SocketName(driver))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("create registration dir %s: %w", dir, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale registration socket %s: %w", path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	defer func() { _ = os.Remove(path) }()
	srv := grpc.NewServer()
	s := &server{
		info: &registerapi.PluginInfo{
			Type: registerapi.CSIPlugin, Name: driver, Endpoint: endpoint, SupportedVersions: versions,
		},
		log:     log,
		failure: make(chan error, 1),
	}
	registerapi.RegisterRegistrationServer(srv, s)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	log.Info("registration socket ready", "socket", path, "endpoint", endpoint)
	select {
	case <-ctx.Done():
		srv.Stop()
		return nil
	case err := <-s.failure:
		stopGracefully(srv) // the kubelet gets its answer first
		return err
	case err := <-served:
		return fmt.Errorf("registration server on %s: %w", path, err)
	}
}

// stopGracefully lets calls in flight answer, for at most 5 s.
func stopGracefully(srv *grpc.Server) {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		srv.Stop()
	}
}
