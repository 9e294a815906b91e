package cachedvolume

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

func TestEffectiveReplicasAndFailoverGrace(t *testing.T) {
	pool := &rcv1.CachePool{}
	if got := EffectiveReplicas(pool); got != 1 {
		t.Errorf("no servers: %d replicas, want 1", got)
	}
	pool.Status.Servers = []rcv1.ServerStatus{{NodeName: "a"}, {NodeName: "b"}}
	if got := EffectiveReplicas(pool); got != 2 {
		t.Errorf("two servers: %d replicas, want 2", got)
	}
	pool.Spec.Replicas = i32(1)
	if got := EffectiveReplicas(pool); got != 1 {
		t.Errorf("replicas 1 asked: %d", got)
	}
	if got := FailoverGrace(pool); got != 5*time.Second {
		t.Errorf("default failover grace %v", got)
	}
	pool.Spec.FailoverGrace = &metav1.Duration{Duration: 3 * time.Second}
	if got := FailoverGrace(pool); got != 3*time.Second {
		t.Errorf("failover grace %v, want 3s", got)
	}
}

// Write-back volumes get a mirror, except in a pool whose data path runs
// TLS (the replication channel does not).
func TestMirrorWanted(t *testing.T) {
	two := &rcv1.CachePool{Status: rcv1.CachePoolStatus{Servers: []rcv1.ServerStatus{{NodeName: "a"}, {NodeName: "b"}}}}
	tls := two.DeepCopy()
	tls.Spec.DataPath.TLS = true
	one := &rcv1.CachePool{Spec: rcv1.CachePoolSpec{Replicas: i32(1)}}
	for _, c := range []struct {
		name   string
		pool   *rcv1.CachePool
		mode   rcv1.WriteMode
		want   bool
		reason string
	}{
		{"write-through, two servers", two, rcv1.WriteThrough, true, ""},
		{"write-around, two servers", two, rcv1.WriteAround, true, ""},
		{"write-back", two, rcv1.WriteBack, true, ""},
		{"write-back, TLS data path", tls, rcv1.WriteBack, false, rcv1.ReasonWriteBackNotMirrored},
		{"write-through, TLS data path", tls, rcv1.WriteThrough, true, ""},
		{"replicas 1", one, rcv1.WriteThrough, false, rcv1.ReasonNotMirrored},
	} {
		vol := &rcv1.CachedVolume{Spec: rcv1.CachedVolumeSpec{WriteMode: c.mode}}
		got, why := mirrorWanted(vol, c.pool)
		if got != c.want || (why == nil) != c.want || (why != nil && why.Reason != c.reason) {
			t.Errorf("%s: wanted %v (%+v), want %v %s", c.name, got, why, c.want, c.reason)
		}
	}
}

// The owner's and the mirror's subsystems never share controller ids.
func TestCntlidRanges(t *testing.T) {
	if lo, hi := cntlidRange(0); lo != 1 || hi != 4095 {
		t.Errorf("slot 0: %d-%d", lo, hi)
	}
	if lo, hi := cntlidRange(cntlidSlots - 1); lo != 61426 || hi != 0xffef {
		t.Errorf("last slot: %d-%d, want 61426-65519", lo, hi)
	}
	pool := &rcv1.CachePool{Status: rcv1.CachePoolStatus{Servers: []rcv1.ServerStatus{{NodeName: "b"}, {NodeName: "a"}, {NodeName: "c"}}}}
	if cntlidSlot(pool, "a") != 0 || cntlidSlot(pool, "c") != 2 {
		t.Errorf("slots by rank: a %d, c %d", cntlidSlot(pool, "a"), cntlidSlot(pool, "c"))
	}
	// The mirror's own slot is free: it keeps it.
	if lo, _ := mirrorCntlidRange(pool, "b", 1); lo != 4096 {
		t.Errorf("mirror b beside owner a: starts at %d, want 4096", lo)
	}
	// The owner's subsystem took b's slot (made when the servers ranked
	// otherwise): the mirror takes the next.
	if lo, _ := mirrorCntlidRange(pool, "b", 4096); lo != 8191 {
		t.Errorf("mirror b beside an owner in its slot: starts at %d, want 8191", lo)
	}
}
