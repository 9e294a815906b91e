package infra_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rackcache/rackcache/test/framework"
)

// TestEnvtestRealAPIServer proves the control plane is the real one: objects
// round-trip through etcd, the server assigns identity and versions, and its
// own validation rejects an invalid object.
func TestEnvtestRealAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, cfg := framework.StartEnvtest(t)

	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "foundation"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-settings", Namespace: "foundation"},
		Data:       map[string]string{"blockSizes": "32Ki,64Ki,128Ki,256Ki"},
	}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatalf("create configmap: %v", err)
	}

	var got corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKeyFromObject(cm), &got); err != nil {
		t.Fatalf("get configmap: %v", err)
	}
	if got.Data["blockSizes"] != "32Ki,64Ki,128Ki,256Ki" {
		t.Fatalf("configmap data: got %v", got.Data)
	}
	if got.UID == "" || got.ResourceVersion == "" || got.CreationTimestamp.IsZero() {
		t.Fatalf("server did not assign uid/resourceVersion/creationTimestamp: %+v", got.ObjectMeta)
	}

	bad := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "Not_A_DNS_Name", Namespace: "foundation"}}
	if err := c.Create(ctx, bad); err == nil {
		t.Fatalf("the apiserver accepted an invalid object name")
	}
	var list corev1.ConfigMapList
	if err := c.List(ctx, &list, client.InNamespace("foundation")); err != nil {
		t.Fatalf("list: %v", err)
	}
	names := map[string]bool{}
	for _, item := range list.Items {
		names[item.Name] = true
	}
	if !names["pool-settings"] || names["Not_A_DNS_Name"] {
		t.Fatalf("list after the rejected create: %v", names)
	}
}
