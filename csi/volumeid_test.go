package csi

import (
	"errors"
	"strings"
	"testing"
)

func TestVolumeIDRoundTrip(t *testing.T) {
	id := newVolumeID("rack-cache", "rbd", "pvc-0b1e")
	s := id.String()
	if !strings.HasPrefix(s, "0001-000a-rack-cache-0003-rbd-") || len(s) != len("0001-000a-rack-cache-0003-rbd-")+36 {
		t.Fatalf("id %q has the wrong layout", s)
	}
	got, err := parseVolumeID(s)
	if err != nil || got != id {
		t.Fatalf("parse(%q) = %+v, %v; want %+v", s, got, err, id)
	}
	if id.Image() != "csi-vol-"+id.UUID {
		t.Errorf("image %q", id.Image())
	}
	// The name decides the uuid: a retried CreateVolume finds its objects.
	if again := newVolumeID("rack-cache", "rbd", "pvc-0b1e"); again != id {
		t.Errorf("same name, other id: %v vs %v", again, id)
	}
	if other := newVolumeID("rack-cache", "rbd", "pvc-0b1f"); other.UUID == id.UUID {
		t.Errorf("two names share uuid %s", id.UUID)
	}
}

func TestSnapshotIDRoundTrip(t *testing.T) {
	src := newVolumeID("p", "rbd-pool", "vol")
	id := newSnapshotID(src, "snap-1")
	got, err := parseSnapshotID(id.String())
	if err != nil || got != id {
		t.Fatalf("parse(%q) = %+v, %v; want %+v", id.String(), got, err, id)
	}
	if got.volumeID != src {
		t.Errorf("source %+v, want %+v", got.volumeID, src)
	}
	// A volume id is not a snapshot id and the other way round.
	if _, err := parseSnapshotID(src.String()); !errors.Is(err, ErrNotFound) {
		t.Errorf("a volume id parsed as a snapshot id: %v", err)
	}
	if _, err := parseVolumeID(id.String()); !errors.Is(err, ErrNotFound) {
		t.Errorf("a snapshot id parsed as a volume id: %v", err)
	}
}

func TestParseVolumeIDRejectsMangledIDs(t *testing.T) {
	good := newVolumeID("pool", "rbd", "x").String()
	for _, id := range []string{
		"",
		"some-vol-id",
		"0002" + good[4:],                          // unknown version
		"0001-0005-pool-0003-rbd-" + good[24:],     // length too long
		"0001-0003-pool-0003-rbd-" + good[24:],     // length too short
		"0001-zzzz-pool-0003-rbd-" + good[24:],     // length not hex
		"0001-0000--0003-rbd-" + good[24:],         // empty pool
		good[:len(good)-1],                         // truncated uuid
		good + "0",                                 // trailing garbage
		strings.Replace(good, "-rbd-", "-rbd_", 1), // separator missing
	} {
		if _, err := parseVolumeID(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("parseVolumeID(%q) = %v, want ErrNotFound", id, err)
		}
	}
}

func TestIDLengthLimit(t *testing.T) {
	short := newVolumeID("pool", "rbd", "x")
	if err := checkIDLength(short.String()); err != nil {
		t.Errorf("short id refused: %v", err)
	}
	long := newVolumeID(strings.Repeat("p", 60), strings.Repeat("r", 30), "x")
	if err := checkIDLength(long.String()); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a %d-byte id passed: %v", len(long.String()), err)
	}
}

func TestParseNodeID(t *testing.T) {
	nqn := "nqn.2014-08.org.nvmexpress:uuid:5f1b0c2e-8d4a-4c61-9b7e-2a3d6e9f0c41"
	name, got, err := parseNodeID(nodeIDOf("node-1", nqn))
	if err != nil || name != "node-1" || got != nqn {
		t.Fatalf("parseNodeID = %q, %q, %v", name, got, err)
	}
	for _, bad := range []string{"", "node-1", "/" + nqn, "node-1/", "node-1/not-an-nqn", "some-fake-node-id"} {
		if _, _, err := parseNodeID(bad); !errors.Is(err, ErrNotFound) {
			t.Errorf("parseNodeID(%q) = %v, want ErrNotFound", bad, err)
		}
	}
}
