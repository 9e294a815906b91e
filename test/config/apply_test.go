package config

import (
	"context"
	"os"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rackcache/rackcache/test/framework"
)

// TestDefaultOverlayAccepted creates every object of config/default in a
// real kube-apiserver (envtest), so the manifests are known valid, then asks
// the apiserver's RBAC whether the operator's ServiceAccount may do what the
// operator does. The ServiceMonitor CRD comes from the Prometheus Operator's
// release through the Go module proxy; when that is unreachable the
// ServiceMonitors alone are skipped, except under CI=true.
func TestDefaultOverlayAccepted(t *testing.T) {
	objs := buildOverlay(t, "default")
	var crdPaths []string
	smCRD, err := serviceMonitorCRD(t)
	switch {
	case err == nil:
		crdPaths = append(crdPaths, smCRD)
	case os.Getenv("CI") == "true":
		t.Fatalf("ServiceMonitor CRD (prometheus-operator %s) unavailable: %v", prometheusOperatorVersion, err)
	default:
		t.Logf("ServiceMonitor CRD (prometheus-operator %s) unavailable, the ServiceMonitors are not created: %v", prometheusOperatorVersion, err)
	}
	_, cfg := framework.StartEnvtest(t, crdPaths...)
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Namespaces and CRDs first: the rest lives in them or is of their kinds.
	first := func(u *unstructured.Unstructured) bool {
		return u.GetKind() == "Namespace" || u.GetKind() == "CustomResourceDefinition"
	}
	for _, pass := range []bool{true, false} {
		for _, u := range objs {
			if first(u) != pass {
				continue
			}
			if u.GetKind() == "ServiceMonitor" && smCRD == "" {
				continue
			}
			if err := c.Create(ctx, u.DeepCopy()); err != nil {
				t.Errorf("the apiserver refused %s %s: %v", u.GetKind(), u.GetName(), err)
			}
			if u.GetKind() == "CustomResourceDefinition" {
				waitEstablished(ctx, t, c, u.GetName())
			}
		}
	}

	expectAccess(ctx, t, c, deploymentName, []access{
		{authzv1.ResourceAttributes{Namespace: namespace, Verb: "update", Group: "coordination.k8s.io", Resource: "leases"}, true},
		{authzv1.ResourceAttributes{Namespace: namespace, Verb: "create", Resource: "events"}, true},
		{authzv1.ResourceAttributes{Namespace: namespace, Verb: "watch", Resource: "pods"}, true},
		{authzv1.ResourceAttributes{Verb: "list", Resource: "nodes"}, true},
		{authzv1.ResourceAttributes{Namespace: namespace, Verb: "get", Resource: "secrets"}, true},
		{authzv1.ResourceAttributes{Namespace: namespace, Verb: "create", Resource: "secrets"}, true},
		{authzv1.ResourceAttributes{Namespace: namespace, Verb: "patch", Group: "apps", Resource: "daemonsets"}, true},
		// A Ceph backend's Secret elsewhere (Rook's namespace) is read by name.
		{authzv1.ResourceAttributes{Namespace: "rook-ceph", Verb: "get", Resource: "secrets"}, true},
		// Secrets are written, listed and watched in the operator's namespace only.
		{authzv1.ResourceAttributes{Namespace: "rook-ceph", Verb: "update", Resource: "secrets"}, false},
		{authzv1.ResourceAttributes{Namespace: "rook-ceph", Verb: "list", Resource: "secrets"}, false},
		{authzv1.ResourceAttributes{Verb: "watch", Resource: "pods"}, false},
		// Leader election is confined to the operator's namespace, and the
		// operator never deletes Nodes.
		{authzv1.ResourceAttributes{Namespace: "default", Verb: "update", Group: "coordination.k8s.io", Resource: "leases"}, false},
		{authzv1.ResourceAttributes{Verb: "delete", Resource: "nodes"}, false},
	})
	// The CSI controller and its sidecars (config/csi).
	expectAccess(ctx, t, c, "rackcache-csi-controller", []access{
		{authzv1.ResourceAttributes{Verb: "create", Group: "rackcache.io", Resource: "cachedvolumes"}, true},
		{authzv1.ResourceAttributes{Verb: "delete", Group: "rackcache.io", Resource: "cachedvolumes"}, true},
		{authzv1.ResourceAttributes{Verb: "get", Group: "rackcache.io", Resource: "cachepools"}, true},
		{authzv1.ResourceAttributes{Namespace: "rook-ceph", Verb: "get", Resource: "secrets"}, true},
		{authzv1.ResourceAttributes{Verb: "create", Resource: "persistentvolumes"}, true},
		{authzv1.ResourceAttributes{Verb: "patch", Group: "storage.k8s.io", Resource: "volumeattachments", Subresource: "status"}, true},
		{authzv1.ResourceAttributes{Verb: "update", Group: "snapshot.storage.k8s.io", Resource: "volumesnapshotcontents", Subresource: "status"}, true},
		{authzv1.ResourceAttributes{Namespace: namespace, Verb: "update", Group: "coordination.k8s.io", Resource: "leases"}, true},
		// Nothing beyond: no CachePool writes, no Secret listing.
		{authzv1.ResourceAttributes{Verb: "update", Group: "rackcache.io", Resource: "cachepools"}, false},
		{authzv1.ResourceAttributes{Namespace: "rook-ceph", Verb: "list", Resource: "secrets"}, false},
	})
	expectAccess(ctx, t, c, "rackcache-csi-node", []access{
		{authzv1.ResourceAttributes{Verb: "get", Resource: "nodes"}, true},
		{authzv1.ResourceAttributes{Verb: "update", Resource: "nodes"}, false},
		{authzv1.ResourceAttributes{Namespace: namespace, Verb: "get", Resource: "secrets"}, false},
		// Following volumes' paths: read CachedVolumes, never change them.
		{authzv1.ResourceAttributes{Verb: "watch", Group: "rackcache.io", Resource: "cachedvolumes"}, true},
		{authzv1.ResourceAttributes{Verb: "update", Group: "rackcache.io", Resource: "cachedvolumes", Subresource: "status"}, false},
	})
}

// access is one question to the apiserver's authorizer and its answer.
type access struct {
	attrs authzv1.ResourceAttributes
	want  bool
}

// expectAccess asks a SubjectAccessReview for each case as service
// account sa of the operator's namespace.
func expectAccess(ctx context.Context, t *testing.T, c client.Client, sa string, cases []access) {
	t.Helper()
	user := "system:serviceaccount:" + namespace + ":" + sa
	for _, tc := range cases {
		review := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &tc.attrs,
		}}
		if err := c.Create(ctx, review); err != nil {
			t.Fatalf("SubjectAccessReview: %v", err)
		}
		if review.Status.Allowed != tc.want {
			t.Errorf("%s may %s %s/%s/%s in %q: allowed=%v, want %v (%s)", sa, tc.attrs.Verb, tc.attrs.Group,
				tc.attrs.Resource, tc.attrs.Subresource, tc.attrs.Namespace, review.Status.Allowed, tc.want, review.Status.Reason)
		}
	}
}

// waitEstablished waits until the CRD serves its kind.
func waitEstablished(ctx context.Context, t *testing.T, c client.Client, name string) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] == "Established" && m["status"] == string(metav1.ConditionTrue) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CRD %s not established: %v", name, err)
	}
}
