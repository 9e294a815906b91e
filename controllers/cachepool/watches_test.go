package cachepool

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func TestPoolChangedIgnoresStatusWrites(t *testing.T) {
	base := testPool("p")
	now := metav1.Now()
	cases := []struct {
		name   string
		change func(*metav1.ObjectMeta)
		want   bool
	}{
		{"status only", func(*metav1.ObjectMeta) {}, false},
		{"spec (generation)", func(m *metav1.ObjectMeta) { m.Generation++ }, true},
		{"deletion", func(m *metav1.ObjectMeta) { m.DeletionTimestamp = &now }, true},
		{"finalizer", func(m *metav1.ObjectMeta) { m.Finalizers = []string{"x"} }, true},
		{"annotation", func(m *metav1.ObjectMeta) { m.Annotations = map[string]string{"a": "b"} }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			after := base.DeepCopy()
			after.Status.ReadyServers = 5
			tc.change(&after.ObjectMeta)
			if got := poolChanged.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: after}); got != tc.want {
				t.Errorf("poolChanged = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNodeChanged(t *testing.T) {
	node := func(labels map[string]string, ready corev1.ConditionStatus, heartbeat int64) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: ready, LastHeartbeatTime: metav1.Unix(heartbeat, 0),
			}}},
		}
	}
	rack := map[string]string{"topology.rackcache.io/rack": "a"}
	cases := []struct {
		name          string
		before, after *corev1.Node
		want          bool
	}{
		{"heartbeat", node(rack, corev1.ConditionTrue, 1), node(rack, corev1.ConditionTrue, 2), false},
		{"rack label", node(rack, corev1.ConditionTrue, 1), node(map[string]string{"topology.rackcache.io/rack": "b"}, corev1.ConditionTrue, 1), true},
		{"not ready", node(rack, corev1.ConditionTrue, 1), node(rack, corev1.ConditionFalse, 2), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := nodeChanged.Update(event.UpdateEvent{ObjectOld: tc.before, ObjectNew: tc.after}); got != tc.want {
				t.Errorf("nodeChanged = %v, want %v", got, tc.want)
			}
		})
	}
}
