package infra_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rackcache/rackcache/test/framework"
)

// TestGuestBootHangIsReported hangs the guest in boot for real (its init is
// busybox's sleep, so nothing ever reaches the console) and checks that
// hack/guest/run.sh notices within its --boot-timeout, retries the boot the
// number of times it was told, warns at half the boot timeout, keeps each
// hung console, and fails with a message that says what happened, instead
// of waiting out --timeout. The
// 5 s --boot-timeout is shorter than a normal boot (7-30 s): what is checked
// is the watchdog's report and retry; the hang itself is real all the same.
func TestGuestBootHangIsReported(t *testing.T) {
	dir, job := neverRunJob(t)
	log := filepath.Join(dir, "console")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	// Words after "--" are init's arguments; the later rdinit= wins.
	cmd := exec.CommandContext(ctx, framework.HackScript("guest/run.sh"),
		"--script", job, "--quiet", "--log", log, "--timeout", "170",
		"--boot-timeout", "5", "--boot-attempts", "2",
		"--append", "rdinit=/bin/sleep -- 100000")
	out, err := cmd.CombinedOutput()
	elapsed := time.Since(start)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 125 {
		t.Fatalf("run.sh: want exit status 125 for a hung boot, got %v after %s\n%s", err, elapsed, out)
	}
	text := string(out)
	if n := strings.Count(text, "hung: the console was silent for 5 s"); n != 2 {
		t.Errorf("want 2 hung-boot warnings (one per attempt), got %d:\n%s", n, text)
	}
	if n := strings.Count(text, "the console has been silent for 2 s and the job has not started"); n != 2 {
		t.Errorf("want 2 early warnings at half the boot timeout (one per attempt), got %d:\n%s", n, text)
	}
	if !strings.Contains(text, "the guest failed to boot 2 times in a row") {
		t.Errorf("the final error does not say the boot hung:\n%s", text)
	}
	for _, f := range []string{log + ".hung-1", log + ".hung-2"} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("the hung boot's console was not kept at %s", f)
		}
	}
	if strings.Contains(text, "timed out after") {
		t.Errorf("run.sh waited for --timeout instead of noticing the silent boot:\n%s", text)
	}
	t.Logf("run.sh reported the hung boot after %s:\n%s", elapsed.Round(time.Second), text)
}

// TestGuestBootPanicIsRetried makes the guest kernel panic in boot for
// real (no init to run: "No working init found") and checks that
// hack/guest/run.sh takes it as a failed boot, as it does a hung one
// (multi-threaded TCG can race the kernel's live code patching while
// modules load): each attempt is reported with the panic's line, the
// boot is retried, and the run fails once the attempts are spent.
func TestGuestBootPanicIsRetried(t *testing.T) {
	_, job := neverRunJob(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, framework.HackScript("guest/run.sh"),
		"--script", job, "--quiet", "--timeout", "170", "--boot-attempts", "2",
		"--append", "rdinit=/nonexistent init=/nonexistent")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 125 {
		t.Fatalf("run.sh: want exit status 125 for a panicking boot, got %v\n%s", err, out)
	}
	text := string(out)
	if n := strings.Count(text, "panicked before the job started: "); n != 2 {
		t.Errorf("want 2 boot-panic warnings (one per attempt), got %d:\n%s", n, text)
	}
	if !strings.Contains(text, "Kernel panic") || !strings.Contains(text, "the guest failed to boot 2 times in a row") {
		t.Errorf("the report does not name the panic and the failed boots:\n%s", text)
	}
}

// neverRunJob builds the guest and writes a job its boot never reaches;
// it returns the test's directory and the job's path.
func neverRunJob(t *testing.T) (string, string) {
	t.Helper()
	framework.RequireCommand(t, "qemu-system-x86_64")
	framework.BuildGuest(t)
	dir := t.TempDir()
	job := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(job, []byte("echo never runs\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, job
}
