// Package exec is the CSI driver's one way to run a program (nvme-cli):
// always under a deadline, logged with secrets redacted, stdout and stderr
// kept apart, errors carrying the exit status and stderr.
package exec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/go-logr/logr"
)

// DefaultTimeout bounds a command whose context has no deadline: a hung
// command must never hold a volume lock forever.
const DefaultTimeout = 2 * time.Minute

// secretFlags are flags whose next argument (or "=value") is a secret.
var secretFlags = []string{"--dhchap-secret", "--dhchap-ctrl-secret", "--tls-key", "--keydata", "-S", "-C"}

// Run runs prog with args and returns its stdout and stderr.
func Run(ctx context.Context, prog string, args ...string) ([]byte, []byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("program", prog, "args", Redact(args))
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	log.V(4).Info("command ran", "took", time.Since(start).String(), "stdout", stdout.String(), "stderr", stderr.String())
	if err != nil {
		return stdout.Bytes(), stderr.Bytes(), &Error{Program: prog, Args: Redact(args), Stderr: strings.TrimSpace(stderr.String()), Err: err, TimedOut: ctx.Err() != nil}
	}
	return stdout.Bytes(), stderr.Bytes(), nil
}

// Error is a failed command.
type Error struct {
	Program  string
	Args     []string
	Stderr   string
	Err      error
	TimedOut bool
}

func (e *Error) Error() string {
	what := e.Err.Error()
	if e.TimedOut {
		what = "timed out (" + what + ")"
	}
	msg := fmt.Sprintf("%s %s: %s", e.Program, strings.Join(e.Args, " "), what)
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// ExitCode is the command's exit status, -1 when it did not exit.
func (e *Error) ExitCode() int {
	var ee *exec.ExitError
	if errors.As(e.Err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// Redact replaces the values of secret flags with "***".
func Redact(args []string) []string {
	out := make([]string, len(args))
	hideNext := false
	for i, a := range args {
		switch {
		case hideNext:
			out[i], hideNext = "***", false
		default:
			out[i] = a
			for _, f := range secretFlags {
				if a == f {
					hideNext = true
				} else if strings.HasPrefix(a, f+"=") {
					out[i] = f + "=***"
				}
			}
		}
	}
	return out
}
