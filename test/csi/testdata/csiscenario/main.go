// Command csiscenario drives the CSI driver the way the kubelet and the
// sidecars do, inside the qemu guest: the controller over TCP (the host's
// rackcache-csi), the node plugin over its Unix socket. It prints
// key=value results for test/csi's data test (data_test.go). Built
// statically for the guest; never shipped.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var (
	controllerAddr = flag.String("controller", "10.0.3.100:9000", "the CSI controller")
	nodeSocket     = flag.String("node", "/tmp/csi/node.sock", "the node plugin's socket")
	paramsJSON     = flag.String("params", "{}", "StorageClass parameters (JSON)")
	secretsJSON    = flag.String("secrets", "{}", "provisioner secrets (JSON)")
	rack           = flag.String("rack", "rack-a", "the preferred rack")
	rackLabel      = flag.String("rack-label", "topology.rackcache.io/rack", "the topology key")
	follow         = flag.Bool("follow", false, "run the path-following scenario (follow.go) instead")
)

const mib = 1 << 20

func main() {
	flag.Parse()
	ctx := context.Background()
	s, err := newScenario()
	if err != nil {
		fail("setup", err)
	}
	if *follow {
		s.runFollow(ctx)
		return
	}
	s.run(ctx)
}

type scenario struct {
	ctrl    csi.ControllerClient
	node    csi.NodeClient
	params  map[string]string
	secrets map[string]string
	nodeID  string
}

func newScenario() (*scenario, error) {
	s := &scenario{}
	if err := json.Unmarshal([]byte(*paramsJSON), &s.params); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(*secretsJSON), &s.secrets); err != nil {
		return nil, err
	}
	cc, err := grpc.NewClient(*controllerAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	nc, err := grpc.NewClient("unix://"+*nodeSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	s.ctrl, s.node = csi.NewControllerClient(cc), csi.NewNodeClient(nc)
	return s, nil
}

// fail prints the failed step and exits non-zero.
func fail(step string, err error) {
	fmt.Printf("failed=%s: %v\n", step, strings.ReplaceAll(err.Error(), "\n", " "))
	os.Exit(1)
}

// must()(call(...)(step) is call's result, or the scenario fails at step.
func must[T any](v T, err error) func(step string) T {
	return func(step string) T {
		if err != nil {
			fail(step, err)
		}
		return v
	}
}

func mountCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func blockCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// volume is a created volume and where it is staged and published.
type volume struct {
	name, stage, target string
	vcap                *csi.VolumeCapability
	vol                 *csi.Volume
	pub                 map[string]string
}

func (s *scenario) create(ctx context.Context, name string, vcap *csi.VolumeCapability, src *csi.VolumeContentSource, extra map[string]string) *volume {
	params := map[string]string{}
	for k, v := range s.params {
		params[k] = v
	}
	for k, v := range extra {
		params[k] = v
	}
	resp := must(s.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 64 * mib},
		VolumeCapabilities: []*csi.VolumeCapability{vcap}, Parameters: params, Secrets: s.secrets,
		VolumeContentSource: src,
		AccessibilityRequirements: &csi.TopologyRequirement{
			Preferred: []*csi.Topology{{Segments: map[string]string{*rackLabel: *rack}}},
		},
	}))("create " + name)
	return &volume{name: name, stage: "/tmp/stage/" + name, target: "/tmp/pub/" + name, vcap: vcap, vol: resp.Volume}
}

func (s *scenario) publish(ctx context.Context, v *volume) {
	resp := must(s.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
		VolumeId: v.vol.VolumeId, NodeId: s.nodeID, VolumeCapability: v.vcap, VolumeContext: v.vol.VolumeContext,
	}))("controller publish " + v.name)
	v.pub = resp.PublishContext
}

func (s *scenario) stage(ctx context.Context, v *volume) error {
	_, err := s.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: v.vol.VolumeId, PublishContext: v.pub, StagingTargetPath: v.stage,
		VolumeCapability: v.vcap, VolumeContext: v.vol.VolumeContext,
	})
	return err
}

func (s *scenario) nodePublish(ctx context.Context, v *volume) {
	must(s.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: v.vol.VolumeId, PublishContext: v.pub, StagingTargetPath: v.stage, TargetPath: v.target,
		VolumeCapability: v.vcap, VolumeContext: v.vol.VolumeContext,
	}))("node publish " + v.name)
}

func (s *scenario) attach(ctx context.Context, v *volume) {
	if err := s.stage(ctx, v); err != nil {
		fail("node stage "+v.name, err)
	}
	s.nodePublish(ctx, v)
}

func (s *scenario) detach(ctx context.Context, v *volume) {
	must(s.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.vol.VolumeId, TargetPath: v.target}))("node unpublish " + v.name)
	must(s.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.vol.VolumeId, StagingTargetPath: v.stage}))("node unstage " + v.name)
}

// Pattern is the deterministic content of a test file: a SHA-256 chain.
func Pattern(seed string, n int) []byte {
	out := make([]byte, 0, n+32)
	h := sha256.Sum256([]byte(seed))
	for len(out) < n {
		out = append(out, h[:]...)
		h = sha256.Sum256(h[:])
	}
	return out[:n]
}

// writeSynced writes a file and makes it durable (file and directory
// fsync): from then on the write is acknowledged.
func writeSynced(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func sameFile(path string, want []byte) bool {
	got, err := os.ReadFile(path)
	return err == nil && bytes.Equal(got, want)
}

// subNQN is the volume's subsystem, from its volume context.
func subNQN(v *volume) string { return v.vol.VolumeContext["subnqn"] }

// controllersOf lists the kernel's controllers of a subsystem (sysfs).
func controllersOf(nqn string) []string {
	var out []string
	ctrls, _ := filepath.Glob("/sys/class/nvme/nvme*")
	for _, c := range ctrls {
		b, err := os.ReadFile(filepath.Join(c, "subsysnqn"))
		if err == nil && strings.TrimSpace(string(b)) == nqn {
			out = append(out, filepath.Base(c))
		}
	}
	return out
}

// waitNoControllers waits up to d for the subsystem's controllers to go.
func waitNoControllers(nqn string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if len(controllersOf(nqn)) == 0 {
			return true
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false
}

func statfsBytes(path string) uint64 {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0
	}
	return st.Blocks * uint64(st.Bsize)
}
