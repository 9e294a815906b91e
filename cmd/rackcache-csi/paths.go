package main

import (
	"context"
	"fmt"
	"reflect"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/csi"
)

// followPaths keeps the host's NVMe paths to its volumes those their
// CachedVolumes list (csi.PathFollower), reading them from an informer:
// a change of a volume's paths wakes a pass at once, and a full pass
// runs every --follow-paths. Without a Kubernetes API (a node plugin run
// by hand with --rack) it says so and returns: staging works without it.
func followPaths(ctx context.Context, cfg *config, d *csi.Driver, n csi.NVMe) error {
	log := logr.FromContextOrDiscard(ctx)
	pn, ok := n.(csi.PathNVMe)
	if !ok || cfg.followPaths <= 0 {
		return nil
	}
	restCfg, err := restConfig(cfg.kubeconfig)
	if err != nil {
		log.Error(err, "not following the volumes' paths: hosts keep the paths they were staged with")
		return nil
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(rcv1.AddToScheme(scheme))
	volumes, err := cache.New(restCfg, cache.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("CachedVolume cache: %w", err)
	}
	inf, err := volumes.GetInformer(ctx, &rcv1.CachedVolume{})
	if err != nil {
		return fmt.Errorf("CachedVolume informer: %w", err)
	}
	changed := make(chan struct{}, 1)
	wake := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { wake() },
		// Status changes every few seconds (stats); only paths matter.
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*rcv1.CachedVolume)
			c, ok2 := cur.(*rcv1.CachedVolume)
			if !ok1 || !ok2 || !reflect.DeepEqual(o.Status.Paths, c.Status.Paths) {
				wake()
			}
		},
	}); err != nil {
		return fmt.Errorf("CachedVolume informer: %w", err)
	}
	go func() {
		if err := volumes.Start(ctx); err != nil {
			log.Error(err, "CachedVolume cache stopped")
		}
	}()
	if !volumes.WaitForCacheSync(ctx) {
		return nil // stopping
	}
	log.Info("following the volumes' paths", "every", cfg.followPaths.String())
	return d.FollowPaths(ctx, csi.PathFollower{Volumes: volumes, NVMe: pn, Every: cfg.followPaths, Changed: changed})
}
