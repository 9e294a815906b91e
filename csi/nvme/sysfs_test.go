package nvme

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// sysfsTree writes the attributes the guest's kernel showed, relative to a
// fake sysfs root.
func sysfsTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, v := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const nsUUID = "3b241101-e2bb-4255-8caf-4136c566a962"

func TestFindNamespaceDevice(t *testing.T) {
	// Native multipath (Debian's default): the namespace head under the
	// subsystem; ng0n1 is the generic char device, nvme0 the controller.
	multipath := sysfsTree(t, map[string]string{
		"class/nvme-subsystem/nvme-subsys0/subsysnqn":    captureNQN,
		"class/nvme-subsystem/nvme-subsys0/nvme0n1/uuid": nsUUID,
		"class/nvme-subsystem/nvme-subsys0/nvme0n1/wwid": "uuid." + nsUUID,
		"class/nvme-subsystem/nvme-subsys0/ng0n1/dev":    "241:0",
		"class/nvme-subsystem/nvme-subsys1/subsysnqn":    "nqn.2025-01.io.rackcache:vol:other",
		"class/nvme-subsystem/nvme-subsys1/nvme1n1/uuid": "00000000-0000-0000-0000-000000000001",
		"class/nvme/nvme0/subsysnqn":                     captureNQN,
		"class/nvme/nvme0/state":                         "live",
		"class/nvme/nvme0/address":                       "traddr=10.0.3.100,trsvcid=4420,src_addr=10.0.3.15",
	})
	if dev, err := FindNamespaceDevice(multipath, captureNQN, nsUUID); err != nil || dev != "/dev/nvme0n1" {
		t.Errorf("multipath: %q, %v", dev, err)
	}
	// Upper-case UUIDs in the volume context still match.
	if dev, err := FindNamespaceDevice(multipath, captureNQN, "3B241101-E2BB-4255-8CAF-4136C566A962"); err != nil || dev != "/dev/nvme0n1" {
		t.Errorf("upper case: %q, %v", dev, err)
	}
	// Another subsystem's namespace is never returned, nor another UUID.
	if _, err := FindNamespaceDevice(multipath, captureNQN, "00000000-0000-0000-0000-000000000001"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another subsystem's namespace: %v", err)
	}
	if _, err := FindNamespaceDevice(multipath, "nqn.2025-01.io.rackcache:vol:absent", nsUUID); !errors.Is(err, ErrNotFound) {
		t.Errorf("absent subsystem: %v", err)
	}

	// Without multipath (nvme_core.multipath=N): under the controller; an
	// older kernel without the uuid attribute has the wwid.
	plain := sysfsTree(t, map[string]string{
		"class/nvme/nvme3/subsysnqn":    captureNQN,
		"class/nvme/nvme3/state":        "connecting",
		"class/nvme/nvme3/nvme3n1/wwid": "uuid." + nsUUID,
	})
	if dev, err := FindNamespaceDevice(plain, captureNQN, nsUUID); err != nil || dev != "/dev/nvme3n1" {
		t.Errorf("no multipath: %q, %v", dev, err)
	}

	if !PathLive(multipath, captureNQN) {
		t.Error("a live controller not seen")
	}
	if PathLive(plain, captureNQN) {
		t.Error("a connecting controller counted as live")
	}
	if PathLive(multipath, "nqn.2025-01.io.rackcache:vol:absent") {
		t.Error("an absent subsystem counted as live")
	}
}

func TestRescanControllersWritesOnlyTheSubsystemsControllers(t *testing.T) {
	root := sysfsTree(t, map[string]string{
		"class/nvme/nvme0/subsysnqn":         captureNQN,
		"class/nvme/nvme0/rescan_controller": "",
		"class/nvme/nvme2/subsysnqn":         captureNQN,
		"class/nvme/nvme2/rescan_controller": "",
		"class/nvme/nvme1/subsysnqn":         "nqn.2025-01.io.rackcache:vol:other",
		"class/nvme/nvme1/rescan_controller": "",
	})
	if err := RescanControllers(root, captureNQN); err != nil {
		t.Fatal(err)
	}
	for ctrl, want := range map[string]string{"nvme0": "1", "nvme2": "1", "nvme1": "\n"} {
		b, err := os.ReadFile(filepath.Join(root, "class/nvme", ctrl, "rescan_controller"))
		if err != nil || string(b) != want {
			t.Errorf("%s rescan_controller = %q, %v; want %q", ctrl, b, err, want)
		}
	}
	if err := RescanControllers(root, "nqn.2025-01.io.rackcache:vol:absent"); !errors.Is(err, ErrNotFound) {
		t.Errorf("absent subsystem: %v", err)
	}
}

// SetKeys writes only the keys that differ, to the subsystem's own
// controllers, the controller key first.
func TestSetKeysWritesChangedKeysOfTheSubsystemsControllers(t *testing.T) {
	const other = "nqn.2025-01.io.rackcache:vol:other"
	root := sysfsTree(t, map[string]string{
		"class/nvme/nvme0/subsysnqn":          captureNQN,
		"class/nvme/nvme0/dhchap_secret":      "DHHC-1:01:old:",
		"class/nvme/nvme0/dhchap_ctrl_secret": "DHHC-1:01:ctrl:",
		"class/nvme/nvme1/subsysnqn":          other,
		"class/nvme/nvme1/dhchap_secret":      "DHHC-1:01:theirs:",
	})
	n, err := SetKeys(root, captureNQN, "DHHC-1:01:new:", "DHHC-1:01:ctrl:")
	if err != nil || n != 1 {
		t.Fatalf("SetKeys = %d, %v", n, err)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read("class/nvme/nvme0/dhchap_secret"); got != "DHHC-1:01:new:" {
		t.Errorf("host key %q", got)
	}
	if got := read("class/nvme/nvme0/dhchap_ctrl_secret"); got != "DHHC-1:01:ctrl:\n" {
		t.Errorf("an unchanged controller key was written: %q", got)
	}
	if got := read("class/nvme/nvme1/dhchap_secret"); got != "DHHC-1:01:theirs:\n" {
		t.Errorf("another subsystem's controller got keys: %q", got)
	}
	if n, err := SetKeys(root, captureNQN, "DHHC-1:01:new:", "DHHC-1:01:ctrl:"); err != nil || n != 0 {
		t.Errorf("a second SetKeys changed %d controllers, %v", n, err)
	}
}
