// Command democsi is `make demo`'s workload in the qemu guest: it does
// what the kubelet and the CSI sidecars do for one pod with one volume —
// CreateVolume from StorageClass parameters (preferring the guest's rack),
// ControllerPublishVolume for this node, NodeStageVolume and
// NodePublishVolume through the node plugin — then runs an application on
// the mounted filesystem: it writes a file, syncs it, and reads it back
// several times with the page cache dropped in between, so every read
// reaches the cache server. It prints "DEMO-VAL key=value" lines for
// hack/demo/csi.sh and leaves the volume unpublished but in place.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	controller := flag.String("controller", "10.0.3.100:9000", "the CSI controller")
	node := flag.String("node", "/tmp/csi/node.sock", "the node plugin's socket")
	name := flag.String("name", "pvc-demo", "the volume's request name (the PVC's PV name)")
	params := flag.String("params", "{}", "StorageClass parameters (JSON)")
	fileMiB := flag.Int("file-mib", 32, "the application's file")
	passes := flag.Int("passes", 3, "read passes over the file")
	secretsURL := flag.String("secrets-url", "", "where Secrets are read (kubectl proxy's /api/v1/namespaces/NS/secrets/), "+
		"for the volume's host keys the kubelet would hand the node plugin; empty: none")
	flag.Parse()
	if err := run(*controller, *node, *name, *params, *secretsURL, *fileMiB, *passes); err != nil {
		fmt.Printf("DEMO: %v\n", err)
		os.Exit(1)
	}
}

func run(controllerAddr, nodeSock, name, paramsJSON, secretsURL string, fileMiB, passes int) error {
	ctx := context.Background()
	var params map[string]string
	if err := json.Unmarshal([]byte(paramsJSON), &params); err != nil {
		return fmt.Errorf("parameters: %w", err)
	}
	cc, err := grpc.NewClient(controllerAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	nc, err := grpc.NewClient("unix://"+nodeSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	ctrl, nodeSvc := csi.NewControllerClient(cc), csi.NewNodeClient(nc)
	vcap := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	info, err := nodeSvc.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		return fmt.Errorf("NodeGetInfo: %w", err)
	}
	fmt.Printf("DEMO: node %s, topology %v\n", info.NodeId, info.AccessibleTopology.GetSegments())
	start := time.Now()
	vol, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 256 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{vcap}, Parameters: params,
		AccessibilityRequirements: &csi.TopologyRequirement{Preferred: []*csi.Topology{info.AccessibleTopology}},
	})
	if err != nil {
		return fmt.Errorf("CreateVolume: %w", err)
	}
	v := vol.Volume
	fmt.Printf("DEMO-VAL volume-id=%s\n", v.VolumeId)
	fmt.Printf("DEMO-VAL subnqn=%s\n", v.VolumeContext["subnqn"])
	fmt.Printf("DEMO-VAL topology=%s\n", v.AccessibleTopology[0].Segments["topology.rackcache.io/rack"])
	fmt.Printf("DEMO-VAL create-ms=%d\n", time.Since(start).Milliseconds())
	pub, err := ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: v.VolumeId, NodeId: info.NodeId, VolumeCapability: vcap, VolumeContext: v.VolumeContext})
	if err != nil {
		return fmt.Errorf("ControllerPublishVolume: %w", err)
	}
	// The kubelet's part: the Secret the StorageClass's node-stage and
	// node-publish templates name (rackcache-keys-${pv.name}).
	secrets, err := readSecret(ctx, secretsURL, "rackcache-keys-"+name)
	if err != nil {
		return err
	}
	staging, target := "/tmp/kubelet/staging/"+name, "/tmp/kubelet/pods/app/volumes/"+name
	if _, err := nodeSvc.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: v.VolumeId, PublishContext: pub.PublishContext, StagingTargetPath: staging, VolumeCapability: vcap, VolumeContext: v.VolumeContext, Secrets: secrets}); err != nil {
		return fmt.Errorf("NodeStageVolume: %w", err)
	}
	if _, err := nodeSvc.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.VolumeId, PublishContext: pub.PublishContext, StagingTargetPath: staging, TargetPath: target, VolumeCapability: vcap, VolumeContext: v.VolumeContext, Secrets: secrets}); err != nil {
		return fmt.Errorf("NodePublishVolume: %w", err)
	}
	fmt.Printf("DEMO: mounted at %s (ext4 on the NVMe/TCP namespace)\n", target)

	// The application: write, sync, read back with cold page caches.
	data := pattern(fileMiB << 20)
	file := filepath.Join(target, "app.dat")
	t0 := time.Now()
	if err := writeSynced(file, data); err != nil {
		return err
	}
	fmt.Printf("DEMO-VAL write-ms=%d\n", time.Since(t0).Milliseconds())
	for p := 1; p <= passes; p++ {
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200); err != nil {
			return fmt.Errorf("drop the page cache: %w", err)
		}
		t0 = time.Now()
		got, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, data) {
			return fmt.Errorf("pass %d read back other data", p)
		}
		fmt.Printf("DEMO-VAL read-%d-ms=%d\n", p, time.Since(t0).Milliseconds())
	}
	fmt.Println("DEMO-VAL verified=true")

	if _, err := nodeSvc.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: target}); err != nil {
		return fmt.Errorf("NodeUnpublishVolume: %w", err)
	}
	if _, err := nodeSvc.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.VolumeId, StagingTargetPath: staging}); err != nil {
		return fmt.Errorf("NodeUnstageVolume: %w", err)
	}
	if _, err := ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: v.VolumeId, NodeId: info.NodeId}); err != nil {
		return fmt.Errorf("ControllerUnpublishVolume: %w", err)
	}
	fmt.Println("DEMO: unpublished and unstaged; the volume stays")
	return nil
}

// readSecret GETs Secret name under base (kubectl proxy's secrets path)
// and returns its data decoded, as the kubelet passes node-stage secrets;
// nil when base is empty.
func readSecret(ctx context.Context, base, name string) (map[string]string, error) {
	if base == "" {
		return nil, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+name, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read Secret %s: %w", name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read Secret %s: %s", name, resp.Status)
	}
	var sec struct {
		Data map[string][]byte `json:"data"` // base64 in JSON, decoded here
	}
	if err := json.NewDecoder(resp.Body).Decode(&sec); err != nil {
		return nil, fmt.Errorf("read Secret %s: %w", name, err)
	}
	out := make(map[string]string, len(sec.Data))
	for k, v := range sec.Data {
		out[k] = string(v)
	}
	fmt.Printf("DEMO: host keys: Secret %s (%d fields), handed to NodeStageVolume and NodePublishVolume as the kubelet does\n", name, len(out))
	return out, nil
}

// pattern is n bytes of a SHA-256 chain (incompressible, reproducible).
func pattern(n int) []byte {
	out := make([]byte, 0, n+32)
	h := sha256.Sum256([]byte("rackcache-demo"))
	for len(out) < n {
		out = append(out, h[:]...)
		h = sha256.Sum256(h[:])
	}
	return out[:n]
}

func writeSynced(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
