package exec

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRunKeepsStdoutAndStderrApart(t *testing.T) {
	out, errOut, err := Run(context.Background(), "sh", "-c", "echo out; echo err >&2")
	if err != nil || string(out) != "out\n" || string(errOut) != "err\n" {
		t.Fatalf("got %q, %q, %v", out, errOut, err)
	}
}

func TestRunFailureSaysWhatAndWhy(t *testing.T) {
	_, _, err := Run(context.Background(), "sh", "-c", "echo broken pipe >&2; exit 3")
	var e *Error
	if !errors.As(err, &e) || e.ExitCode() != 3 || !strings.Contains(err.Error(), "broken pipe") {
		t.Fatalf("error %v", err)
	}
}

func TestRunHonoursTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, _, err := Run(ctx, "sleep", "30")
	var e *Error
	if !errors.As(err, &e) || !e.TimedOut {
		t.Fatalf("a command past its deadline: %v", err)
	}
}

func TestRedact(t *testing.T) {
	got := Redact([]string{"connect", "--dhchap-secret", "DHHC-1:00:abc", "--tls-key=xyz", "--keydata=NVMeTLSkey-1:01:k:", "-n", "nqn"})
	want := []string{"connect", "--dhchap-secret", "***", "--tls-key=***", "--keydata=***", "-n", "nqn"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
