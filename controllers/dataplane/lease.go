package dataplane

import (
	"context"
	"time"
)

// The control plane's lease on a server's ANA paths (docs/dataplane.md,
// "Lease and ANA fence"): renewed by the operator; when it runs out, every
// ANA path of the server reports inaccessible until the next renewal.

// LeaseStatus is rackcache_lease_get's answer.
type LeaseStatus struct {
	// Granted: a lease was granted at least once (before that, nothing is
	// fenced).
	Granted bool `json:"granted"`
	// Fenced: it ran out without a renewal; every ANA path reports
	// inaccessible.
	Fenced bool `json:"fenced"`
	// ExpiresInMS is the time left (0 when not granted or run out).
	ExpiresInMS uint64 `json:"expires_in_ms"`
	// Holder is who renewed it last ("" before the first grant).
	Holder string `json:"holder"`
}

// ExpiresIn is the time left.
func (s LeaseStatus) ExpiresIn() time.Duration {
	return time.Duration(s.ExpiresInMS) * time.Millisecond
}

// RenewLease grants or renews the lease for d from now (1 s to 10 min,
// whole milliseconds) on behalf of holder (printable ASCII without spaces,
// for the dataplane's logs), lifting the fence if it ran out before.
// IsInvalid for a duration or holder out of range.
func (c *Client) RenewLease(ctx context.Context, holder string, d time.Duration) error {
	p := map[string]any{"holder": holder, "duration_ms": d.Milliseconds()}
	return c.call(ctx, "rackcache_lease_renew", p, nil)
}

// Lease reads the lease.
func (c *Client) Lease(ctx context.Context) (LeaseStatus, error) {
	var s LeaseStatus
	err := c.call(ctx, "rackcache_lease_get", nil, &s)
	return s, err
}
