package nvme

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHostNQNFilesAreOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nvme", "hostnqn")
	nqn, id, err := HostNQN(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(nqn, uuidNQNPrefix) || !strings.HasSuffix(nqn, id) {
		t.Fatalf("nqn %q, id %q", nqn, id)
	}
	for _, p := range []string{path, filepath.Join(dir, "nvme", "hostid")} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %o, want 600", p, fi.Mode().Perm())
		}
	}
	// A file left readable by others (nvme-cli's package creates it 0644)
	// is tightened, and its NQN kept.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	again, _, err := HostNQN(path)
	if err != nil {
		t.Fatal(err)
	}
	if again != nqn {
		t.Fatalf("the NQN changed: %q, then %q", nqn, again)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %o after a restart, want 600", fi.Mode().Perm())
	}
}
