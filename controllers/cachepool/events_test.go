package cachepool

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

func TestTransitionEvents(t *testing.T) {
	srv := func(node string, ready bool) rcv1.ServerStatus {
		return rcv1.ServerStatus{NodeName: node, Ready: ready}
	}
	deleting := func(msg string) []metav1.Condition {
		return []metav1.Condition{{Type: rcv1.ConditionReady, Status: metav1.ConditionFalse, Reason: rcv1.ReasonDeleting, Message: msg}}
	}
	cases := []struct {
		name     string
		old, cur rcv1.CachePoolStatus
		want     []string
	}{
		{"nothing changed", rcv1.CachePoolStatus{Servers: []rcv1.ServerStatus{srv("a", true)}}, rcv1.CachePoolStatus{Servers: []rcv1.ServerStatus{srv("a", true)}}, nil},
		{"new ready server", rcv1.CachePoolStatus{}, rcv1.CachePoolStatus{Servers: []rcv1.ServerStatus{srv("a", true)}}, []string{EventServerReady}},
		{"new server starting", rcv1.CachePoolStatus{}, rcv1.CachePoolStatus{Servers: []rcv1.ServerStatus{srv("a", false)}}, nil},
		{"server fails", rcv1.CachePoolStatus{Servers: []rcv1.ServerStatus{srv("a", true)}}, rcv1.CachePoolStatus{Servers: []rcv1.ServerStatus{srv("a", false)}}, []string{EventServerNotReady}},
		{"ready server vanishes", rcv1.CachePoolStatus{Servers: []rcv1.ServerStatus{srv("a", true), srv("b", true)}}, rcv1.CachePoolStatus{Servers: []rcv1.ServerStatus{srv("b", true)}}, []string{EventServerNotReady}},
		{"deletion blocked", rcv1.CachePoolStatus{}, rcv1.CachePoolStatus{Conditions: deleting("2 volumes")}, []string{EventDeletionBlocked}},
		{"still blocked, same volumes", rcv1.CachePoolStatus{Conditions: deleting("2 volumes")}, rcv1.CachePoolStatus{Conditions: deleting("2 volumes")}, nil},
		{"still blocked, fewer volumes", rcv1.CachePoolStatus{Conditions: deleting("2 volumes")}, rcv1.CachePoolStatus{Conditions: deleting("1 volumes")}, []string{EventDeletionBlocked}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range transitionEvents(&tc.old, &tc.cur) {
				got = append(got, e.Reason)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("events %v, want %v", got, tc.want)
			}
		})
	}
}
