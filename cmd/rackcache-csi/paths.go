package main

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/csi"
)

// volumeWatch reads CachedVolumes through an informer, for the node's
// stage (current paths) and its path follower; changed gets a value when
// a volume's paths change. Without a Kubernetes API (a node plugin run by
// hand with --rack) it says so and returns nil: staging then uses the
// publish context alone, and paths are not followed.
func volumeWatch(ctx context.Context, cfg *config) (client.Reader, <-chan struct{}, error) {
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
	r := &syncedReader{Reader: volumes}
	// The node serves at once: until the cache has synced, reads fail
	// fast (a stage then uses the publish context) instead of waiting on
	// an apiserver that may be far away.
	go func() {
		if volumes.WaitForCacheSync(ctx) {
			r.synced.Store(true)
			wake()
		}
	}()
	return r, changed, nil
}

// syncedReader reads an informer's cache once it has synced; before, every
// read fails at once (a cache's reads would wait for the sync).
type syncedReader struct {
	client.Reader
	synced atomic.Bool
}

func (r *syncedReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if !r.synced.Load() {
		return errNotSynced
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r *syncedReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if !r.synced.Load() {
		return errNotSynced
	}
	return r.Reader.List(ctx, list, opts...)
}

var errNotSynced = errors.New("CachedVolumes not read from the apiserver yet")

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
