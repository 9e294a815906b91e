package cachedvolume

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/hostkeys"
)

// TestNextPairs: new hosts get generation 1, left hosts lose their pair,
// a pair as old as the pool's interval and a new rotation request get the
// next generation, and nothing else changes a pair.
func TestNextPairs(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	a, b, c := "nqn.2014-08.org.nvmexpress:uuid:a", "nqn.2014-08.org.nvmexpress:uuid:b", "nqn.2014-08.org.nvmexpress:uuid:c"
	pa, _ := hostkeys.NewPair(a, 4, t0, false)
	pc, _ := hostkeys.NewPair(c, 1, t0, false)
	have := map[string]hostkeys.Pair{a: pa, c: pc}
	pool := &rcv1.CachePool{Spec: rcv1.CachePoolSpec{DataPath: rcv1.DataPath{KeyRotationInterval: &metav1.Duration{Duration: 24 * time.Hour}}}}
	vol := &rcv1.CachedVolume{Spec: rcv1.CachedVolumeSpec{AllowedHosts: []string{a, b}}}

	got, rotated, err := nextPairs(vol, pool, have, "", t0.Add(time.Hour))
	if err != nil || rotated || len(got) != 2 || got[a] != pa || got[b].Generation != 1 || got[b].HostNQN != b {
		t.Fatalf("an hour on: %+v rotated %v err %v", got, rotated, err)
	}
	if _, ok := got[c]; ok {
		t.Fatal("a host that left allowedHosts kept its keys")
	}
	got, _, _ = nextPairs(vol, pool, have, "", t0.Add(24*time.Hour))
	if got[a].Generation != 5 || got[a].Host == pa.Host || !got[a].Created.Equal(t0.Add(24*time.Hour)) {
		t.Fatalf("a day on: %+v", got[a])
	}
	pool.Spec.DataPath.KeyRotationInterval = &metav1.Duration{}
	if got, _, _ = nextPairs(vol, pool, have, "", t0.Add(1000*time.Hour)); got[a] != pa {
		t.Fatal("an interval of 0 rotated")
	}
	vol.Annotations = map[string]string{rcv1.RotateHostKeysAnnotation: "x"}
	if got, rotated, _ = nextPairs(vol, pool, have, "", t0); !rotated || got[a].Generation != 5 {
		t.Fatalf("a rotation request: %+v rotated %v", got[a], rotated)
	}
	if got, rotated, _ = nextPairs(vol, pool, have, "x", t0); rotated || got[a] != pa {
		t.Fatal("a request already acted on rotated again")
	}
	// A TLS pool: a pair without a PSK gets the next generation, with one;
	// then it stays.
	pool.Spec.DataPath.TLS = true
	got, _, _ = nextPairs(vol, pool, have, "x", t0)
	if got[a].Generation != 5 || got[a].PSK == "" || got[b].PSK == "" {
		t.Fatalf("TLS: %+v", got)
	}
	if again, _, _ := nextPairs(vol, pool, got, "x", t0); again[a] != got[a] {
		t.Fatal("a pair with its PSK was replaced")
	}
}

// TestDesiredHostKeysNameThePSK: a pair's PSK becomes a keyring key of
// the volume's (under its prefix, so teardown drops it) next to the
// DH-HMAC-CHAP keys; a pair without one has no PSK name.
func TestDesiredHostKeysNameThePSK(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	with, _ := hostkeys.NewPair("nqn.2014-08.org.nvmexpress:uuid:a", 2, t0, true)
	without, _ := hostkeys.NewPair("nqn.2014-08.org.nvmexpress:uuid:b", 1, t0, false)
	got := desiredHostKeys("vol1", map[string]hostkeys.Pair{with.HostNQN: with, without.HostNQN: without})
	k := got[with.HostNQN]
	if k.Names.PSK == "" || string(k.PSK) != with.PSK || !strings.HasPrefix(k.Names.PSK, keyPrefix("vol1")) || !strings.Contains(k.Names.PSK, ".2.psk.") {
		t.Fatalf("with a PSK: %+v", k.Names)
	}
	if n := got[without.HostNQN].Names; n.PSK != "" || n.Host == "" {
		t.Fatalf("without a PSK: %+v", n)
	}
}
