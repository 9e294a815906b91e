package cachedvolume

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"

	"github.com/rackcache/rackcache/controllers/dataplane"
)

// Only a failed transport makes a server lost; refusals and local failures
// are errors of the pass, never a reason to re-place or degrade.
func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"dial refused", fmt.Errorf("apply: %w", &url.Error{Op: "Post", URL: "https://x", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}), true},
		{"unix dial", &net.OpError{Op: "dial", Net: "unix", Err: syscall.ENOENT}, true},
		{"deadline", fmt.Errorf("read answer: %w", context.DeadlineExceeded), true},
		{"cut mid-answer", fmt.Errorf("read answer: %w", io.ErrUnexpectedEOF), true},
		{"rpc refusal", fmt.Errorf("create: %w", &dataplane.RPCError{Code: -17, Message: "exists"}), false},
		{"no device with room", errors.New("device with most room has 10 MiB free, the volume needs 100 MiB"), false},
		{"http 401", fmt.Errorf("dataplane bdev_get_bdevs: %w", errors.New("HTTP 401 Unauthorized: bad token")), false},
		{"decode", fmt.Errorf("dataplane x: decode result: %w", errors.New("json: cannot unmarshal")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := unreachable(tc.err); got != tc.want {
				t.Fatalf("unreachable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
