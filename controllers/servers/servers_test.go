package servers

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

func node(name, rack string, ready bool) *corev1.Node {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"example.com/rack": rack}},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}},
	}
}

func pod(name, pool, nodeName, ip string, phase corev1.PodPhase, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "rackcache-system", Labels: Labels(pool)},
		Spec:       corev1.PodSpec{NodeName: nodeName},
		Status: corev1.PodStatus{Phase: phase, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

// TestList: a pool's servers are its bound, live dataplane pods with their
// Node's rack (from the pool's label key), sorted by node; of two pods on
// one node the ready one stays; pods of other pools, unbound or finished
// pods and pods whose Node is gone are left out.
func TestList(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		node("n2", "rack-b", true), node("n1", "rack-a", false), node("n3", "rack-a", true),
		pod("p-n2", "fast", "n2", "10.0.0.2", corev1.PodRunning, true),
		pod("p-n1", "fast", "n1", "10.0.0.1", corev1.PodRunning, false),
		pod("p-n3-old", "fast", "n3", "10.0.0.3", corev1.PodRunning, false),
		pod("p-n3-new", "fast", "n3", "10.0.0.3", corev1.PodRunning, true),
		pod("p-unbound", "fast", "", "", corev1.PodPending, false),
		pod("p-failed", "fast", "n2", "10.0.0.2", corev1.PodFailed, false),
		pod("p-gone", "fast", "n9", "10.0.0.9", corev1.PodRunning, true),
		pod("p-other", "slow", "n2", "10.0.0.2", corev1.PodRunning, true),
	).Build()
	pool := &rcv1.CachePool{ObjectMeta: metav1.ObjectMeta{Name: "fast"}}
	pool.Spec.Placement.RackLabel = "example.com/rack"
	got, err := List(context.Background(), c, "rackcache-system", pool)
	if err != nil {
		t.Fatal(err)
	}
	want := []Server{
		{NodeName: "n1", Rack: "rack-a", Address: "10.0.0.1", PodName: "p-n1", PodReady: false, NodeReady: false},
		{NodeName: "n2", Rack: "rack-b", Address: "10.0.0.2", PodName: "p-n2", PodReady: true, NodeReady: true},
		{NodeName: "n3", Rack: "rack-a", Address: "10.0.0.3", PodName: "p-n3-new", PodReady: true, NodeReady: true},
	}
	if len(got) != len(want) {
		t.Fatalf("List = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("server %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
