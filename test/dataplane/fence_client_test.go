package dataplane_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/test/framework"
)

// The lease on the ANA paths through the typed client: nothing granted
// at first, refusals for a duration out of range, then a grant with its
// holder and time left (long enough that nothing is fenced here; the
// daemon's lease_fence.rs lets one run out).
func TestTypedClientLease(t *testing.T) {
	c := framework.StartDataplane(t).Client
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	l, err := c.Lease(ctx)
	must(t, "Lease", err)
	if l != (dataplane.LeaseStatus{}) {
		t.Errorf("Lease before any grant = %+v, want the zero status", l)
	}
	wantErr(t, "a 500 ms lease", c.RenewLease(ctx, "operator", 500*time.Millisecond), dataplane.IsInvalid, "IsInvalid")
	wantErr(t, "an 11 min lease", c.RenewLease(ctx, "operator", 11*time.Minute), dataplane.IsInvalid, "IsInvalid")
	wantErr(t, "a holder with a space", c.RenewLease(ctx, "the operator", time.Minute), dataplane.IsInvalid, "IsInvalid")
	must(t, "RenewLease", c.RenewLease(ctx, "operator-0", 10*time.Minute))
	l, err = c.Lease(ctx)
	must(t, "Lease", err)
	if !l.Granted || l.Fenced || l.Holder != "operator-0" || l.ExpiresIn() <= 0 || l.ExpiresIn() > 10*time.Minute {
		t.Errorf("Lease after a 10 min grant = %+v, want granted, not fenced, operator-0, time left", l)
	}
}

// A registered cluster's client address and blocklisting through the
// typed client against the real Ceph: the address Ceph knows, the
// refusals (unknown cluster, this server's own connection, a negative
// expiry) and a blocklisting Ceph lists (rbd_blocklist.rs fences a live
// server's client).
func TestTypedClientCephFence(t *testing.T) {
	ceph := framework.StartCeph(t)
	c := framework.StartDataplane(t).Client
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := c.RegisterRbdCluster(ctx, dataplane.RbdCluster{Name: "ceph0", UserID: ceph.User, MonHost: ceph.MonHost, Key: dataplane.Secret(ceph.Key)})
	must(t, "RegisterRbdCluster", err)

	info, err := c.RbdClusterInfo(ctx, "ceph0")
	must(t, "RbdClusterInfo", err)
	if info.Name != "ceph0" || info.UserID != ceph.User || !strings.Contains(info.ClientAddress, "/") {
		t.Errorf("RbdClusterInfo(ceph0) = %+v, want ceph0, user %s and an IP:PORT/NONCE address", info, ceph.User)
	}
	if _, ok := info.ConfigParam["key"]; ok {
		t.Errorf("RbdClusterInfo shows the cephx key: %+v", info.ConfigParam)
	}
	_, err = c.RbdClusterInfo(ctx, "nope")
	wantErr(t, "RbdClusterInfo of an unknown cluster", err, dataplane.IsNotFound, "IsNotFound")

	wantErr(t, "blocklisting its own client", c.BlocklistCephClient(ctx, "ceph0", info.ClientAddress, time.Minute),
		dataplane.IsInvalid, "IsInvalid")
	wantErr(t, "blocklisting through an unknown cluster", c.BlocklistCephClient(ctx, "nope", "127.0.0.1:0/4242", time.Minute),
		dataplane.IsNotFound, "IsNotFound")
	if err := c.BlocklistCephClient(ctx, "ceph0", "127.0.0.1:0/4242", -time.Second); err == nil {
		t.Errorf("a negative expiry was sent")
	}
	must(t, "BlocklistCephClient", c.BlocklistCephClient(ctx, "ceph0", "127.0.0.1:0/4242", 90*time.Second))
	must(t, "BlocklistCephClient again", c.BlocklistCephClient(ctx, "ceph0", "127.0.0.1:0/4242", time.Hour))
	listed, err := ceph.Admin(ctx, "ceph", "osd", "blocklist", "ls")
	must(t, "ceph osd blocklist ls", err)
	if !strings.Contains(listed, "127.0.0.1:0/4242") {
		t.Errorf("ceph osd blocklist ls does not list the client:\n%s", listed)
	}
}
