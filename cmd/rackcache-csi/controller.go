package main

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/csi"
)

// restConfig is --kubeconfig, else in-cluster, else $KUBECONFIG.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("no kubeconfig (--kubeconfig, in-cluster or $KUBECONFIG): %w", err)
	}
	return cfg, nil
}

// kubeClient is an uncached client: every CSI call reads the apiserver.
func kubeClient(kubeconfig string) (client.Client, *rest.Config, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(rcv1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return c, cfg, nil
}

// controllerOptions wires the controller service: the apiserver and Ceph
// (through go-ceph). It is ready while the apiserver answers /readyz.
func controllerOptions(cfg *config) (csi.ControllerOptions, func(context.Context) error, error) {
	c, restCfg, err := kubeClient(cfg.kubeconfig)
	if err != nil {
		return csi.ControllerOptions{}, nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(restCfg)
	if err != nil {
		return csi.ControllerOptions{}, nil, fmt.Errorf("apiserver client: %w", err)
	}
	ready := func(ctx context.Context) error {
		if err := disco.RESTClient().Get().AbsPath("/readyz").Do(ctx).Error(); err != nil {
			return fmt.Errorf("apiserver: %w", err)
		}
		return nil
	}
	return csi.ControllerOptions{Client: c, Ceph: cephConnector{}, VolumeReadyTimeout: cfg.volumeReadyTimeout}, ready, nil
}
