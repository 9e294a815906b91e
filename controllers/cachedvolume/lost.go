package cachedvolume

import (
	"time"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// LostAction is what to do about a volume's server.
type LostAction int

const (
	// ServerHealthy: the server is listed, ready and answers.
	ServerHealthy LostAction = iota
	// LostWaiting: the server is lost, the grace period still runs (it may
	// come back with its cache warm and its dirty data).
	LostWaiting
	// LostReplace: place the volume on another server, its cache cold.
	LostReplace
	// LostDegrade: a write-back volume's dirty data is on the lost server;
	// moving it would serve stale data from Ceph, so it stays, Degraded.
	LostDegrade
	// LostPromote: fence the lost owner and promote the volume's mirror.
	LostPromote
)

// LostInput is what the lost-server decision looks at.
type LostInput struct {
	// Listed: the server is in the pool's status.servers.
	Listed bool
	// Ready: the pool reports the server ready.
	Ready bool
	// RPCError is the error of the last call to the server ("" when it
	// answered or was not called).
	RPCError string
	// MayHoldDirtyData: the volume runs (or is to run) write-back.
	MayHoldDirtyData bool
	// Promotable: the volume has a ready mirror (for write-back, one in
	// sync) and the lost owner can be fenced (its Ceph client is known);
	// FailoverGrace then applies instead of Grace.
	Promotable    bool
	FailoverGrace time.Duration
	// LostSince is when the volume was first seen lost (zero: just now).
	LostSince time.Time
	Now       time.Time
	Grace     time.Duration
}

// LostDecision is the lost-server decision.
type LostDecision struct {
	Action LostAction
	// Why says how the server was found lost.
	Why string
	// RequeueAfter is when the grace period ends (LostWaiting).
	RequeueAfter time.Duration
}

// DecideLost decides what a volume whose server may be lost does.
func DecideLost(in LostInput) LostDecision {
	var why string
	switch {
	case !in.Listed:
		why = "the server is no longer one of the pool's servers"
	case !in.Ready:
		why = "the pool reports the server not ready"
	case in.RPCError != "":
		why = "the server does not answer: " + in.RPCError
	default:
		return LostDecision{Action: ServerHealthy}
	}
	since := in.LostSince
	if since.IsZero() {
		since = in.Now
	}
	grace := in.Grace
	// A write-back volume's mirror is Promotable only while it holds every
	// acknowledged write (Mirrored True once its owner reported it in sync).
	promote := in.Promotable
	if promote {
		grace = in.FailoverGrace
	}
	if left := since.Add(grace).Sub(in.Now); left > 0 {
		return LostDecision{Action: LostWaiting, Why: why, RequeueAfter: left}
	}
	if promote {
		return LostDecision{Action: LostPromote, Why: why}
	}
	if in.MayHoldDirtyData {
		return LostDecision{Action: LostDegrade, Why: why}
	}
	return LostDecision{Action: LostReplace, Why: why}
}

// mayHoldDirtyData: write-back now, or asked for and perhaps already
// running; either way dirty data may exist only on the server.
func mayHoldDirtyData(running, wanted rcv1.WriteMode) bool {
	return running == rcv1.WriteBack || wanted == rcv1.WriteBack
}
