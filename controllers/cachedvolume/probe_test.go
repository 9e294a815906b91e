package cachedvolume

import (
	"context"
	"net"
	"testing"
)

// A port that accepts connections but says nothing (a hung process whose
// kernel still completes handshakes) is no live data path; nor is one
// that refuses. The rig tests (failover_test.go) see a real dataplane's
// portal answer.
func TestDataPathProbeNeedsAnICResp(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer func() { _ = c.Close() }()
		}
	}()
	port := int32(l.Addr().(*net.TCPAddr).Port)
	if dataPathAnswers(context.Background(), "127.0.0.1", port) {
		t.Error("a silent listener passed the probe")
	}
	_ = l.Close()
	if dataPathAnswers(context.Background(), "127.0.0.1", port) {
		t.Error("a closed port passed the probe")
	}
}
