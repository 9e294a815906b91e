// Command demokube stands in for a Kubernetes cluster in `make demo`
// (hack/demo.sh), where there is no cluster and no kubelet:
//
//	demokube control-plane --dir DIR --assets ASSETS
//	    a real etcd and kube-apiserver (envtest's, built by
//	    hack/envtest-assets.sh), an admin kubeconfig in DIR/kubeconfig;
//	    runs until SIGTERM.
//	demokube kubelet --kubeconfig K --node NAME --address IP --dir DIR --dataplane BIN [--label k=v]...
//	    registers a Ready Node and runs, as local processes, the pods of
//	    the DaemonSets that select it (the dataplane of each CachePool):
//	    the Pod object as the DaemonSet controller makes it, its Secret,
//	    ConfigMap, emptyDir and hostPath volumes as files under DIR, the
//	    container as the local rackcache-dataplane binary with the
//	    DaemonSet's own arguments, restarted when it exits, and the pod's
//	    status (podIP, Ready from its readiness probe) as a kubelet writes it,
//	    and the DaemonSet's status as its controller would for one node.
//
// It is demo scaffolding, not a test fake: the apiserver, the operator and
// the dataplane processes it starts are the real ones.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

func main() {
	ctrl.SetLogger(zap.New())
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: demokube control-plane|kubelet [flags] (see hack/demokube/main.go)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	switch os.Args[1] {
	case "control-plane":
		err = runControlPlane(ctx, os.Args[2:])
	case "kubelet":
		err = runKubelet(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (control-plane or kubelet)", os.Args[1])
	}
	if err != nil {
		ctrl.Log.Error(err, "demokube failed", "command", os.Args[1])
		os.Exit(1)
	}
}
