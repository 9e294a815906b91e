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

// volumeWatch reads CachedVolumes through an informer, for the node's
// stage (current paths) and its path follower; changed gets a value when
// a volume's paths change. Without a Kubernetes API (a node plugin run by
// hand with --rack) it says so and returns nil: staging then uses the
// publish context alone, and paths are not followed.
func volumeWatch(ctx context.Context, cfg *config) (cache.Cache, <-chan struct{}, error) {
	log := logr.FromContextOrDiscard(ctx)
	if cfg.followPaths <= 0 {
		return nil, nil, nil
	}
	restCfg, err := restConfig(cfg.kubeconfig)
	if err != nil {
		log.Error(err, "not following the volumes' paths: hosts keep the paths they were staged with")
		return nil, nil, nil
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(rcv1.AddToScheme(scheme))
	volumes, err := cache.New(restCfg, cache.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("CachedVolume cache: %w", err)
	}
	inf, err := volumes.GetInformer(ctx, &rcv1.CachedVolume{})
	if err != nil {
		return nil, nil, fmt.Errorf("CachedVolume informer: %w", err)
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
		return nil, nil, fmt.Errorf("CachedVolume informer: %w", err)
	}
	go func() {
		if err := volumes.Start(ctx); err != nil {
			log.Error(err, "CachedVolume cache stopped")
		}
	}()
	if !volumes.WaitForCacheSync(ctx) {
		return nil, nil, fmt.Errorf("CachedVolume cache: not synced before the node plugin stopped")
	}
	return volumes, changed, nil
}

// followPaths runs the node's path follower (csi.PathFollower) when the
// node reads CachedVolumes.
func followPaths(ctx context.Context, cfg *config, d *csi.Driver, opts csi.NodeOptions, changed <-chan struct{}) error {
	pn, ok := opts.NVMe.(csi.PathNVMe)
	if !ok || opts.Volumes == nil {
		return nil
	}
	logr.FromContextOrDiscard(ctx).Info("following the volumes' paths", "every", cfg.followPaths.String())
	return d.FollowPaths(ctx, csi.PathFollower{Volumes: opts.Volumes, NVMe: pn, Every: cfg.followPaths, Changed: changed})
}
