package nvme

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/uuid"
)

// uuidNQNPrefix is the NVMe spec's host NQN form built from a UUID.
const uuidNQNPrefix = "nqn.2014-08.org.nvmexpress:uuid:"

// HostNQN reads the host NQN at path (/etc/nvme/hostnqn) and the host id
// beside it (hostid), creating them once when absent: a UUID-based NQN,
// and the same UUID as host id. They then stay stable across restarts, as
// the target's allow lists and the kernel need. Both files are kept 0600
// (an existing file readable by others is tightened): the NQN is not a
// secret on the wire, but nothing on the node needs to hand it to
// unprivileged users either.
func HostNQN(path string) (nqn, hostID string, err error) {
	idPath := filepath.Join(filepath.Dir(path), "hostid")
	nqn, err = readOrCreate(path, func() string { return uuidNQNPrefix + uuid.NewString() })
	if err != nil {
		return "", "", err
	}
	hostID, err = readOrCreate(idPath, func() string {
		if u, ok := strings.CutPrefix(nqn, uuidNQNPrefix); ok {
			if _, err := uuid.Parse(u); err == nil {
				return u
			}
		}
		return uuid.NewString()
	})
	if err != nil {
		return "", "", err
	}
	return nqn, hostID, nil
}

func readOrCreate(path string, create func() string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil && strings.TrimSpace(string(b)) != "" {
		if err := ownerOnly(path); err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	v := create()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	// Written aside and renamed: a crash never leaves half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(v+"\n"), hostFileMode); err != nil {
		return "", fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("create %s: %w", path, err)
	}
	return v, nil
}

// hostFileMode is the mode of the host NQN and host id files.
const hostFileMode = 0o600

// ownerOnly makes path readable by its owner alone if it is not already.
func ownerOnly(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(path, hostFileMode); err != nil {
		return fmt.Errorf("make %s readable by its owner only: %w", path, err)
	}
	return nil
}
