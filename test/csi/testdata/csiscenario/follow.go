package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// stepURL is where the host answers a step (framework.RunGuestWithSteps).
const stepURL = "http://10.0.3.100:8080/"

// runFollow: a write-through block volume with a mirror is staged (two
// paths); the host removes the mirror and then places it again, and the
// node plugin's path follower (no CSI call in between) must drop the
// mirror's path and then connect it again, I/O going on through the
// namespace head all along.
func (s *scenario) runFollow(ctx context.Context) {
	info := must(s.node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{}))("node get info")
	s.nodeID = info.NodeId
	v := s.create(ctx, "follow-1", blockCap(), nil, map[string]string{"writeMode": "WriteThrough"})
	s.publish(ctx, v)
	fmt.Printf("follow-published-paths=%d\n", len(strings.Split(v.pub["paths"], ",")))
	s.attach(ctx, v)
	nqn := subNQN(v)
	fmt.Printf("follow-staged-paths=%d\n", liveControllers(nqn))
	stamp := func(i int) []byte { return Pattern(fmt.Sprintf("follow-%d", i), 4096) }

	// Each step returns once the CachedVolume lists the new paths; what
	// follows is the node's part, timed.
	step("mirror-off")
	t0 := time.Now()
	fmt.Printf("follow-after-mirror-off=%d\n", waitLiveControllers(nqn, 1, 90*time.Second))
	fmt.Printf("follow-off-ms=%d\n", time.Since(t0).Milliseconds())
	fmt.Printf("follow-io-one-path=%t\n", writeRead(v.target, 0, stamp(0)))

	step("mirror-on")
	t0 = time.Now()
	fmt.Printf("follow-after-mirror-on=%d\n", waitLiveControllers(nqn, 2, 90*time.Second))
	fmt.Printf("follow-on-ms=%d\n", time.Since(t0).Milliseconds())
	fmt.Printf("follow-io-two-paths=%t\n", writeRead(v.target, 4096, stamp(1)))

	s.detach(ctx, v)
	must(s.ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: v.vol.VolumeId, NodeId: s.nodeID}))("controller unpublish " + v.name)
	must(s.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.vol.VolumeId, Secrets: s.secrets}))("delete " + v.name)
	fmt.Println("scenario=done")
}

// step asks the host to run its handler for name and waits for it.
func step(name string) {
	resp, err := http.Get(stepURL + name) //nolint:gosec,noctx // the test's own step server
	if err != nil {
		fail("step "+name, err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fail("step "+name, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body)))
	}
}

// liveControllers counts the subsystem's live controllers.
func liveControllers(nqn string) int {
	n := 0
	for _, c := range controllersOf(nqn) {
		b, _ := os.ReadFile(filepath.Join("/sys/class/nvme", c, "state"))
		if strings.TrimSpace(string(b)) == "live" {
			n++
		}
	}
	return n
}

// waitLiveControllers waits up to d until the subsystem has exactly want
// controllers, all live; it returns how many it has then (live or not).
func waitLiveControllers(nqn string, want int, d time.Duration) int {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if len(controllersOf(nqn)) == want && liveControllers(nqn) == want {
			return want
		}
		time.Sleep(200 * time.Millisecond)
	}
	return len(controllersOf(nqn))
}

// writeRead writes data at off of the published block device, syncs, and
// reads it back.
func writeRead(dev string, off int64, data []byte) bool {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		fmt.Printf("follow-io-error=%v\n", err)
		return false
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		fmt.Printf("follow-io-error=%v\n", err)
		return false
	}
	if err := f.Sync(); err != nil {
		fmt.Printf("follow-io-error=%v\n", err)
		return false
	}
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, off); err != nil {
		fmt.Printf("follow-io-error=%v\n", err)
		return false
	}
	return bytes.Equal(got, data)
}
