package registration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// dial connects as the kubelet's plugin watcher would, over the socket. It
// waits for a socket, not just a file: the stale-file test puts a regular file
// there first, and Serve replaces it. Calls wait for the listener too, since a
// socket is bound an instant before it listens.
func dial(t *testing.T, path string) registerapi.RegistrationClient {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no registration socket at %s", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
	conn, err := grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return registerapi.NewRegistrationClient(conn)
}

// callContext bounds a call that waits for the listener.
func callContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestServeRegistersAndRemovesItsSocket(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "csi.rackcache.io-reg.sock")
	// A stale file from a crashed plugin does not stop a new one.
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, dir, "csi.rackcache.io", "/var/lib/kubelet/plugins/csi.rackcache.io/csi.sock", []string{"1.0.0"})
	}()
	c := dial(t, path)
	info, err := c.GetInfo(callContext(t), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != "csi.rackcache.io" ||
		info.Endpoint != "/var/lib/kubelet/plugins/csi.rackcache.io/csi.sock" || len(info.SupportedVersions) != 1 {
		t.Fatalf("GetInfo = %+v", info)
	}
	if _, err := c.NotifyRegistrationStatus(callContext(t), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after cancel: %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

func TestServeEndsWhenTheKubeletRefuses(t *testing.T) {
	dir := t.TempDir()
	done := make(chan error, 1)
	go func() {
		done <- Serve(context.Background(), dir, "csi.rackcache.io", "/csi/csi.sock", []string{"1.0.0"})
	}()
	c := dial(t, filepath.Join(dir, SocketName("csi.rackcache.io")))
	if _, err := c.NotifyRegistrationStatus(callContext(t), &registerapi.RegistrationStatus{PluginRegistered: false, Error: "version not supported"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "version not supported") {
			t.Fatalf("Serve ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve went on after the kubelet refused the plugin")
	}
}
