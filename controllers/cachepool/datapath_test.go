package cachepool

import (
	"context"
	"strings"
	"testing"
	"time"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/test/framework"
)

func TestPickDataAddress(t *testing.T) {
	addrs := []dataplane.Address{
		{Interface: "lo", Address: "127.0.0.1", Up: true},
		{Interface: "eth0", Address: "10.0.0.5", Up: true},
		{Interface: "eth1", Address: "fd00::7", Up: true},
		{Interface: "eth1", Address: "10.20.3.4", Up: true},
		{Interface: "eth2", Address: "10.30.0.9", Up: false},
	}
	for _, c := range []struct {
		dp   rcv1.DataPath
		want string
		err  string
	}{
		{rcv1.DataPath{Network: "198.51.100.0/24"}, "", "no address in 198.51.100.0/24"},
		{rcv1.DataPath{Network: "10.20.0.0/16"}, "10.20.3.4", ""},
		{rcv1.DataPath{Interface: "eth1"}, "10.20.3.4", ""}, // IPv4 first
		{rcv1.DataPath{Network: "fd00::/64"}, "fd00::7", ""},
		{rcv1.DataPath{Network: "10.30.0.0/16"}, "", "no address in 10.30.0.0/16"}, // down
		{rcv1.DataPath{Interface: "bond0"}, "", "no address on interface bond0"},
	} {
		got, err := pickDataAddress(addrs, c.dp)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: %q, %v; want an error with %q", c.dp, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%+v: %q, %v; want %q", c.dp, got, err, c.want)
		}
	}
}

// The real dataplane lists its interface addresses; a pool naming the
// loopback network or interface is served at 127.0.0.1, one naming a
// network the server has no address in is refused with the reason.
func TestDataAddressFromARealDataplane(t *testing.T) {
	dp := framework.StartDataplane(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, p := range []rcv1.DataPath{{Network: "127.0.0.0/8"}, {Interface: "lo"}} {
		got, err := dataAddress(ctx, dp.Client, p)
		if err != nil || got != "127.0.0.1" {
			t.Errorf("%+v: %q, %v; want 127.0.0.1", p, got, err)
		}
	}
	if got, err := dataAddress(ctx, dp.Client, rcv1.DataPath{}); err != nil || got != "" {
		t.Errorf("no data path: %q, %v", got, err)
	}
	if _, err := dataAddress(ctx, dp.Client, rcv1.DataPath{Network: "198.51.100.0/24"}); err == nil || !strings.Contains(err.Error(), "198.51.100.0/24") {
		t.Errorf("a network the server is not on: %v", err)
	}
}
