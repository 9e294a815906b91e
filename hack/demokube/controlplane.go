package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// runControlPlane starts etcd and kube-apiserver, writes an admin
// kubeconfig, and stops both when ctx ends.
func runControlPlane(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("control-plane", flag.ExitOnError)
	dir := fs.String("dir", "", "directory for the kubeconfig")
	assets := fs.String("assets", os.Getenv("KUBEBUILDER_ASSETS"), "directory holding kube-apiserver and etcd (hack/envtest-assets.sh --print-dir)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *assets == "" {
		return errors.New("control-plane needs --dir and --assets")
	}
	env := &envtest.Environment{BinaryAssetsDirectory: *assets}
	if _, err := env.Start(); err != nil {
		return fmt.Errorf("start etcd and kube-apiserver: %w", err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			ctrl.Log.Error(err, "stop etcd and kube-apiserver")
		}
	}()
	admin, err := env.AddUser(envtest.User{Name: "demo-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("add the demo's admin user: %w", err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return fmt.Errorf("render the admin kubeconfig: %w", err)
	}
	// Written under another name first: the demo waits for the file, and
	// must never read half of it.
	path := filepath.Join(*dir, "kubeconfig")
	if err := os.WriteFile(path+".tmp", kubeconfig, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	ctrl.Log.Info("control plane up", "apiserver", env.Config.Host, "kubeconfig", path)
	<-ctx.Done()
	return nil
}
