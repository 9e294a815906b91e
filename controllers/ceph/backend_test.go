package ceph

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestParseRookMonitors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  bool
	}{
		{in: "a=10.0.0.1:6789", want: []string{"10.0.0.1:6789"}},
		{in: "b=10.0.0.2:6789,a=10.0.0.1:6789", want: []string{"10.0.0.1:6789", "10.0.0.2:6789"}},
		{in: " a=10.0.0.1:6789 , ", want: []string{"10.0.0.1:6789"}},
		{in: "a=[fd00::1]:3300", want: []string{"[fd00::1]:3300"}},
		{in: "", err: true},
		{in: "10.0.0.1:6789", err: true},
		{in: "a=", err: true},
		{in: "a=10.0.0.1", err: true},
	} {
		got, err := ParseRookMonitors(tc.in)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("ParseRookMonitors(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestBackendFingerprintFollowsEveryField(t *testing.T) {
	base := Backend{Monitors: []string{"10.0.0.1:6789"}, UserID: "csi-rbd-node", Key: "AQBkey=="}
	seen := map[string]string{base.Fingerprint(): "base"}
	for name, b := range map[string]Backend{
		"monitors": {Monitors: []string{"10.0.0.2:6789"}, UserID: base.UserID, Key: base.Key},
		"user":     {Monitors: base.Monitors, UserID: "admin", Key: base.Key},
		"key":      {Monitors: base.Monitors, UserID: base.UserID, Key: "AQBother=="},
	} {
		f := b.Fingerprint()
		if prev, dup := seen[f]; dup {
			t.Errorf("changing the %s gives the fingerprint of %s", name, prev)
		}
		seen[f] = name
		if strings.Contains(f, string(b.Key)) {
			t.Errorf("fingerprint %q shows the key", f)
		}
	}
	if got := fmt.Sprintf("%v %+v", base, base); strings.Contains(got, "AQBkey") {
		t.Errorf("formatting a Backend shows the key: %s", got)
	}
}
