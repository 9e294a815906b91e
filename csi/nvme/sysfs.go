package nvme

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// namespaceDir matches a namespace's sysfs directory: nvme0n1 (the
// multipath head under the subsystem), or nvme0c0n1 (a path) is skipped.
var namespaceDir = regexp.MustCompile(`^nvme[0-9]+n[0-9]+$`)

// FindNamespaceDevice finds the block device (/dev/nvmeXnY) of the
// namespace with UUID nsUUID in subsystem subNQN, from sysfs alone.
// With native multipath (Debian's default) namespaces sit under
// class/nvme-subsystem/<subsys>/; without it, under class/nvme/<ctrl>/.
func FindNamespaceDevice(sysfsRoot, subNQN, nsUUID string) (string, error) {
	want := strings.ToLower(nsUUID)
	var dirs []string
	for _, class := range []string{"nvme-subsystem", "nvme"} {
		entries, _ := filepath.Glob(filepath.Join(sysfsRoot, "class", class, "*"))
		for _, e := range entries {
			if readAttr(filepath.Join(e, "subsysnqn")) == subNQN {
				dirs = append(dirs, e)
			}
		}
	}
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !namespaceDir.MatchString(e.Name()) {
				continue
			}
			if namespaceUUID(filepath.Join(d, e.Name())) == want {
				return "/dev/" + e.Name(), nil
			}
		}
	}
	return "", fmt.Errorf("%w: namespace %s of %s in %s", ErrNotFound, nsUUID, subNQN, sysfsRoot)
}

// namespaceUUID reads a namespace's UUID: its uuid attribute, else its
// wwid "uuid.<uuid>".
func namespaceUUID(dir string) string {
	if u := readAttr(filepath.Join(dir, "uuid")); u != "" {
		return strings.ToLower(u)
	}
	if w, ok := strings.CutPrefix(readAttr(filepath.Join(dir, "wwid")), "uuid."); ok {
		return strings.ToLower(w)
	}
	return ""
}

// PathLive reports whether a controller of subNQN is live.
func PathLive(sysfsRoot, subNQN string) bool {
	ctrls, _ := filepath.Glob(filepath.Join(sysfsRoot, "class", "nvme", "nvme*"))
	for _, c := range ctrls {
		if readAttr(filepath.Join(c, "subsysnqn")) == subNQN && readAttr(filepath.Join(c, "state")) == "live" {
			return true
		}
	}
	return false
}

// RescanControllers asks every controller of subNQN to rescan its
// namespaces (what `nvme ns-rescan` does), so a grown namespace's new size
// reaches the block device even if the host missed the target's notice.
func RescanControllers(sysfsRoot, subNQN string) error {
	ctrls, _ := filepath.Glob(filepath.Join(sysfsRoot, "class", "nvme", "nvme*"))
	found := false
	for _, c := range ctrls {
		if readAttr(filepath.Join(c, "subsysnqn")) != subNQN {
			continue
		}
		found = true
		if err := os.WriteFile(filepath.Join(c, "rescan_controller"), []byte("1"), 0); err != nil {
			return fmt.Errorf("rescan controller %s of %s: %w", filepath.Base(c), subNQN, err)
		}
	}
	if !found {
		return fmt.Errorf("%w: no controller of %s in %s", ErrNotFound, subNQN, sysfsRoot)
	}
	return nil
}

func readAttr(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// SetKeys gives every controller of subNQN the DH-HMAC-CHAP secrets host
// and ctrl where they differ from the controller's (sysfs dhchap_secret,
// dhchap_ctrl_secret, root-only): the kernel then re-authenticates every
// queue while I/O goes on. The controller key is written first, so the
// re-authentication the host key's write starts checks the controller
// with the matching key. Returns how many controllers got new keys.
func SetKeys(sysfsRoot, subNQN, host, ctrl string) (int, error) {
	ctrls, _ := filepath.Glob(filepath.Join(sysfsRoot, "class", "nvme", "nvme*"))
	changed := 0
	for _, c := range ctrls {
		if readAttr(filepath.Join(c, "subsysnqn")) != subNQN {
			continue
		}
		wrote := false
		for _, a := range []struct{ attr, secret string }{{"dhchap_ctrl_secret", ctrl}, {"dhchap_secret", host}} {
			if a.secret == "" || readAttr(filepath.Join(c, a.attr)) == a.secret {
				continue
			}
			if err := os.WriteFile(filepath.Join(c, a.attr), []byte(a.secret), 0); err != nil {
				// The error names the attribute, never the secret.
				return changed, fmt.Errorf("give controller %s of %s its new %s: %w", filepath.Base(c), subNQN, a.attr, err)
			}
			wrote = true
		}
		if wrote {
			changed++
		}
	}
	return changed, nil
}
