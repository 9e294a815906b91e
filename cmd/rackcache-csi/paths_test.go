package main

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// Until the cache has synced, reads fail at once (a stage then uses the
// publish context) instead of waiting for the apiserver.
func TestSyncedReaderFailsFastUntilSynced(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := rcv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cv := &rcv1.CachedVolume{ObjectMeta: metav1.ObjectMeta{Name: "v"}}
	r := &syncedReader{Reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(cv).Build()}
	ctx := context.Background()
	if err := r.Get(ctx, client.ObjectKey{Name: "v"}, &rcv1.CachedVolume{}); !errors.Is(err, errNotSynced) {
		t.Errorf("get before the sync: %v", err)
	}
	if err := r.List(ctx, &rcv1.CachedVolumeList{}); !errors.Is(err, errNotSynced) {
		t.Errorf("list before the sync: %v", err)
	}
	r.synced.Store(true)
	var list rcv1.CachedVolumeList
	if err := r.List(ctx, &list); err != nil || len(list.Items) != 1 {
		t.Errorf("list after the sync: %d, %v", len(list.Items), err)
	}
	if err := r.Get(ctx, client.ObjectKey{Name: "v"}, &rcv1.CachedVolume{}); err != nil {
		t.Errorf("get after the sync: %v", err)
	}
}
