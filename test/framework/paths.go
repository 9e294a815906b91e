// Package framework starts and stops the real parts that rackcache's tests run
// against (a one-node Ceph, the qemu guest with the kernel's NVMe/TCP
// initiator, envtest's kube-apiserver and etcd) and cleans them up when the
// test ends, also when it fails. Each helper drives the project's own hack/
// scripts, so tests and developers start the same things the same way.
package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// RepoRoot returns the root of the rackcache checkout: from this file's
// path when it was compiled in, else (a `-trimpath` build, as `make test`
// does so that tests share the images' compiled packages) the nearest
// directory above the working directory whose go.mod is this module's;
// `go test` runs each package in its own directory. Found once per test
// binary: helpers call it for every script and asset they locate.
var RepoRoot = sync.OnceValue(func() string {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	}
	dir, err := os.Getwd()
	if err != nil {
		panic(fmt.Sprintf("framework: locating the checkout: %v", err))
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(mod), "module "+modulePath+"\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			panic("framework: no go.mod of " + modulePath + " above the working directory")
		}
		dir = parent
	}
})

// modulePath is the checkout's Go module.
const modulePath = "github.com/rackcache/rackcache"

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

// FreeLoopbackPort returns a TCP port on 127.0.0.1 that was free a moment
// ago. It comes from below the kernel's ephemeral range (see freePortRange):
// a port the kernel handed out for :0 can be taken by an outgoing connection
// before the process under test binds it, which CI saw under load.
func FreeLoopbackPort(t testing.TB) int {
	t.Helper()
	port, err := freePortRange(1)
	if err != nil {
		t.Fatalf("find a free loopback port: %v", err)
	}
	return port
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
