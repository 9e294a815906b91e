// Package framework starts and stops the real parts that rackcache's tests run
// against (a one-node Ceph, the qemu guest with the kernel's NVMe/TCP
// initiator, envtest's kube-apiserver and etcd) and cleans them up when the
// test ends, also when it fails. Each helper drives the project's own hack/
// scripts, so tests and developers start the same things the same way.
package framework

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// RepoRoot returns the root of the rackcache checkout.
func RepoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("framework: cannot locate source file")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// HackScript returns the path of a script under hack/.
func HackScript(name string) string {
	return filepath.Join(RepoRoot(), "hack", name)
}

// CacheDir returns the cache outside the clone where built assets live
// (same rule as hack/lib.sh).
func CacheDir() string {
	if d := os.Getenv("RACKCACHE_CACHE"); d != "" {
		return d
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "rackcache")
}

// FreeLoopbackPort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreeLoopbackPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free loopback port: %v", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// RequireCommand skips nothing: a missing tool is a set-up error that
// `make deps` fixes, so the test fails with that advice.
func RequireCommand(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found on PATH: run `make deps` (hack/deps.sh) first", name)
	}
	return p
}

// MissingDependency stops a test whose outside dependency is absent: under
// CI=true it fails (nothing may skip there), elsewhere it skips with a
// visible message saying what to install.
func MissingDependency(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: required)", msg)
	}
	t.Skipf("SKIP: %s", msg)
}
