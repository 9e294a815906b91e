package hostkeys

import (
	"strings"
	"testing"
	"time"
)

func TestPairsRoundTripThroughSecretDataAndCSISecrets(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	a, err := NewPair("nqn.2014-08.org.nvmexpress:uuid:aaaa", 3, now, true)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewPair("nqn.2014-08.org.nvmexpress:uuid:bbbb", 1, now, false)
	data := map[string][]byte{}
	Put(data, a)
	Put(data, b)
	got := Pairs(data)
	if len(got) != 2 || got[a.HostNQN] != a || got[b.HostNQN] != b {
		t.Fatalf("Pairs = %+v", got)
	}
	if a.PSK == "" || b.PSK != "" {
		t.Fatalf("PSKs: %q with, %q without", a.PSK, b.PSK)
	}
	csi := map[string]string{}
	for k, v := range data {
		csi[k] = string(v)
	}
	p, found, err := ForHost(csi, b.HostNQN)
	if err != nil || !found || p != b {
		t.Fatalf("ForHost = %+v %v %v", p, found, err)
	}
	if _, found, _ := ForHost(csi, "nqn.2014-08.org.nvmexpress:uuid:cccc"); found {
		t.Fatal("a host without an entry found one")
	}
	Remove(data, a.HostNQN)
	if got := Pairs(data); len(got) != 1 || got[b.HostNQN] != b {
		t.Fatalf("after Remove: %+v", got)
	}
}

func TestMalformedEntriesAreRefusedOrSkipped(t *testing.T) {
	p, _ := NewPair("nqn.2014-08.org.nvmexpress:uuid:aaaa", 1, time.Now(), true)
	data := map[string][]byte{}
	Put(data, p)
	id := EntryID(p.HostNQN)
	data[id+".tls-psk"] = []byte(strings.Replace(p.PSK, "NVMeTLSkey-1:01:", "NVMeTLSkey-1:01:A", 1))
	if got := Pairs(data); len(got) != 0 {
		t.Fatalf("a corrupt PSK was read: %+v", got)
	}
	Put(data, p)
	data[id+".dhchap-secret"] = []byte(strings.Replace(p.Host, "A", "B", 1) + "x")
	if got := Pairs(data); len(got) != 0 {
		t.Fatalf("a corrupt secret was read: %+v", got)
	}
	csi := map[string]string{}
	for k, v := range data {
		csi[k] = string(v)
	}
	if _, found, err := ForHost(csi, p.HostNQN); !found || err == nil {
		t.Fatalf("ForHost of a corrupt entry: found %v err %v", found, err)
	}
}

func TestNewSecretsAreWellFormedAndDistinct(t *testing.T) {
	seen := map[string]bool{}
	for range 16 {
		s, err := NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckSecret(s); err != nil {
			t.Fatalf("%v", err)
		}
		if !strings.HasPrefix(s, "DHHC-1:01:") || seen[s] {
			t.Fatalf("secret %d bytes, prefix %q, repeated %v", len(s), s[:10], seen[s])
		}
		seen[s] = true
	}
	for _, bad := range []string{"", "DHHC-1:01:AAAA:", "DHHC-1:01:" + strings.Repeat("A", 48) + ":", "DHHC-2:01:x:"} {
		if CheckSecret(bad) == nil {
			t.Errorf("CheckSecret(%q) = nil", bad)
		}
	}
	psk, err := NewPSK()
	if err != nil || CheckPSK(psk) != nil || !strings.HasPrefix(psk, "NVMeTLSkey-1:01:") {
		t.Fatalf("NewPSK = %d bytes, %v; check %v", len(psk), err, CheckPSK(psk))
	}
	if CheckPSK(strings.Replace(psk, "NVMeTLSkey-1", "DHHC-1", 1)) == nil || CheckSecret(psk) == nil {
		t.Error("a PSK and a DH-HMAC-CHAP secret pass for each other")
	}
}

func TestSecretNameForPV(t *testing.T) {
	if got := SecretNameForPV("pvc-0b6d7c1e"); got != "rackcache-keys-pvc-0b6d7c1e" {
		t.Errorf("a PV name: %q", got)
	}
	for _, bad := range []string{"sanity-Node-Volume", strings.Repeat("a", 250), "a_b"} {
		if got := SecretNameForPV(bad); got != "" {
			t.Errorf("%q gave %q, want none", bad, got)
		}
	}
}
