package dashboard

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rackcache/rackcache/test/framework"
)

// chromiumTimeout bounds one Chromium run (it normally takes a few seconds).
const chromiumTimeout = 90 * time.Second

// chromiumBinary finds Debian's chromium. Without it the test cannot run:
// under CI that is a set-up error (hack/deps.sh installs it), elsewhere a
// visible skip.
func chromiumBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("chromium")
	if err != nil {
		framework.MissingDependency(t, "chromium is missing (hack/deps.sh apt installs Debian's chromium): %v", err)
	}
	return p
}

// runChromium runs headless Chromium once with args after the fixed flags
// and returns its standard output. Chromium may reach 127.0.0.1 only:
// every other name resolves to nothing, and the background services that
// would call home (updates, sync, metrics, safe browsing lists) are off.
// It runs in a process group of its own, killed as a whole when the run
// ends or times out, so no renderer or helper outlives the test; its
// profile and caches live in a temporary directory removed afterwards,
// also when the test fails.
func runChromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	home := t.TempDir()
	flags := []string{
		"--headless=new",
		"--no-sandbox", // the tests may run as root, where Chromium's sandbox refuses to start
		"--disable-gpu",
		"--disable-dev-shm-usage",
		"--user-data-dir=" + filepath.Join(home, "profile"),
		"--disable-background-networking",
		"--disable-component-update",
		"--disable-sync",
		"--no-first-run",
		"--disable-default-apps",
		"--disable-domain-reliability",
		"--no-pings",
		"--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
		// Lets the page's script fetch the state and render before the
		// DOM is dumped or the screenshot taken.
		"--virtual-time-budget=5000",
	}
	ctx, cancel := context.WithTimeout(context.Background(), chromiumTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(flags, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, "config"),
		"XDG_CACHE_HOME="+filepath.Join(home, "cache"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.Process != nil {
		// Helpers left in the group (zygote, utility processes) go too;
		// ESRCH means there were none.
		if kerr := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
			t.Logf("kill chromium's process group: %v", kerr)
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("chromium %s did not finish within %v; stderr:\n%s", strings.Join(args, " "), chromiumTimeout, tail(stderr.String()))
	}
	if err != nil {
		t.Fatalf("chromium %s: %v; stderr:\n%s", strings.Join(args, " "), err, tail(stderr.String()))
	}
	return stdout.Bytes()
}

// tail is the end of a long log.
func tail(s string) string {
	const n = 4000
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
