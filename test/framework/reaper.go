package framework

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// startReaper runs cleanup (a shell command line) once this test process has
// exited, however it exits: t.Cleanup does not run when `go test -timeout`
// panics or the process is killed, and daemons such as Ceph's fork away from
// us, so nothing else would stop them. The reaper is a detached shell that
// polls our PID; when the test cleaned up normally, the cleanup it runs finds
// nothing left to do.
func startReaper(cleanup string) error {
	script := fmt.Sprintf(`while kill -0 %d 2>/dev/null; do sleep 1; done; %s`, os.Getpid(), cleanup)
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, nil
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start reaper: %w", err)
	}
	// The reaper outlives us by design; release it so Go does not track it.
	return cmd.Process.Release()
}

// shellQuote quotes s for /bin/sh: single quotes, with any single quote
// inside closed, escaped and reopened.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
