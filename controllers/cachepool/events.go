package cachepool

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// Event reasons of transitions (EventCertificateRenewed is in credentials.go).
const (
	EventServerReady     = "ServerReady"
	EventServerNotReady  = "ServerNotReady"
	EventDeletionBlocked = "DeletionBlocked"
)

// poolEvent is an Event to record on the pool.
type poolEvent struct {
	Type, Reason, Message string
}

// transitionEvents are the Events between two statuses: a server becoming
// ready (also a new one), a ready server becoming not ready or vanishing,
// deletion becoming blocked (or the number of blocking volumes changing),
// and the pool refused by the operator's admission (or for another reason).
func transitionEvents(old, cur *rcv1.CachePoolStatus) []poolEvent {
	var out []poolEvent
	wasReady := map[string]bool{}
	for _, s := range old.Servers {
		wasReady[s.NodeName] = s.Ready
	}
	present := map[string]bool{}
	for _, s := range cur.Servers {
		present[s.NodeName] = true
		switch {
		case s.Ready && !wasReady[s.NodeName]:
			out = append(out, poolEvent{corev1.EventTypeNormal, EventServerReady,
				fmt.Sprintf("cache server on node %s is ready (%s)", s.NodeName, s.Address)})
		case !s.Ready && wasReady[s.NodeName]:
			out = append(out, poolEvent{corev1.EventTypeWarning, EventServerNotReady,
				fmt.Sprintf("cache server on node %s is not ready: %s", s.NodeName, s.Message)})
		}
	}
	for _, s := range old.Servers {
		if s.Ready && !present[s.NodeName] {
			out = append(out, poolEvent{corev1.EventTypeWarning, EventServerNotReady,
				fmt.Sprintf("cache server on node %s is gone (no dataplane pod)", s.NodeName)})
		}
	}
	before := meta.FindStatusCondition(old.Conditions, rcv1.ConditionReady)
	after := meta.FindStatusCondition(cur.Conditions, rcv1.ConditionReady)
	if after != nil && after.Reason == rcv1.ReasonNotAllowed &&
		(before == nil || before.Reason != rcv1.ReasonNotAllowed || before.Message != after.Message) {
		out = append(out, poolEvent{corev1.EventTypeWarning, rcv1.ReasonNotAllowed, after.Message})
	}
	if after != nil && after.Reason == rcv1.ReasonDeleting &&
		(before == nil || before.Reason != rcv1.ReasonDeleting || before.Message != after.Message) {
		out = append(out, poolEvent{corev1.EventTypeWarning, EventDeletionBlocked, after.Message})
	}
	return out
}
