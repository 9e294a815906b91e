package csi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	csispec "github.com/container-storage-interface/spec/lib/go/csi"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	cephbackend "github.com/rackcache/rackcache/controllers/ceph"
	"github.com/rackcache/rackcache/test/framework"
)

// dataJob runs the node plugin and testdata/csiscenario in the guest.
// Arguments: the node plugin's extra flags, the scenario's flags.
const dataJob = `
modprobe ext4 || echo "modules=failed"
mkdir -p /tmp/csi
rackcache-csi --mode node --endpoint unix:///tmp/csi/node.sock --node-name guest --rack rack-a \
	--registration-dir "" --probe-listen "" %s >/tmp/node.log 2>&1 &
i=0; while [ ! -S /tmp/csi/node.sock ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
csiscenario %s
echo "scenario-exit=$?"
echo "--- node plugin log (tail)"
tail -n 40 /tmp/node.log
`

// snapshotFileSeed is testdata/csiscenario's seed of the file it writes
// before the snapshot.
const snapshotFileSeed = "rackcache-snapshot-file"

var _ = Describe("Volumes in the guest's kernel", func() {
	It("keep files across unstage and stage, snapshot every acknowledged write, grow online, refuse unpublished hosts and end revoked connections", func(ctx SpecContext) {
		scenario := buildScenario()
		params, _ := json.Marshal(map[string]string{"cachePool": poolName, "pool": ceph.Pool, "cacheSize": "25%", "writeMode": "WriteBack"})
		secrets, _ := json.Marshal(map[string]string{cephbackend.UserIDKey: ceph.User, cephbackend.UserKeyKey: ceph.Key})
		fwd, portalFlags := guestPortals()
		flags := fmt.Sprintf("-controller 10.0.3.100:%d -params '%s' -secrets '%s' -rack %s", guestControllerPort, params, secrets, rackA)
		res := framework.RunGuest(GinkgoTB(), framework.GuestOptions{
			Script:          fmt.Sprintf(dataJob, strings.Join(portalFlags, " "), flags),
			Binaries:        append([]string{nodeBinary + ":/usr/local/bin/rackcache-csi", scenario}, fsTools()...),
			GuestForwards:   map[int]int{guestControllerPort: controllerPort},
			GuestForwardsTo: fwd,
			Timeout:         guestTimeout,
		})
		vals := framework.GuestValues(GinkgoTB(), res.Output)
		Expect(vals).NotTo(HaveKey("failed"), "a scenario step failed")
		Expect(vals).To(HaveKeyWithValue("scenario-exit", "0"))
		Expect(vals).To(HaveKeyWithValue("topology", rackA), "a volume wanted in rack-a is served there")
		Expect(vals).To(HaveKeyWithValue("disconnected-after-unstage", "true"))
		Expect(vals).To(HaveKeyWithValue("files-intact", "true"), "files survive unstage and stage")
		Expect(vals).To(HaveKeyWithValue("snapshot-holds-writes", "true"), "a clone of the snapshot holds the writes acknowledged before it")
		Expect(vals).To(HaveKeyWithValue("expanded", "true"), "online expansion reaches the guest's filesystem (fs bytes before,after: %s)", vals["expand-fs-bytes"])
		Expect(vals).To(HaveKeyWithValue("expanded-writable", "true"), "80 MiB fit on the grown 128 MiB volume")
		Expect(vals).To(HaveKeyWithValue("unpublished-refused", "true"), "the target refuses a host the volume was not published to")
		Expect(vals).To(HaveKeyWithValue("revoked", "true"), "unpublish ends the host's live connection")
		Expect(vals).To(HaveKeyWithValue("scenario", "done"))

		// Ceph's own view of the expanded image.
		expandedID := vals["expanded-volume-id"]
		Expect(len(expandedID)).To(BeNumerically(">", 36))
		info, err := ceph.Admin(ctx, "rbd", "info", "--format", "json", ceph.Pool+"/csi-vol-"+expandedID[len(expandedID)-36:])
		Expect(err).NotTo(HaveOccurred(), "rbd info: %s", info)
		Expect(info).To(ContainSubstring(`"size":134217728`), "the RBD image grew to 128 MiB")

		// Ceph's own copy of the snapshot holds the file written before it.
		snapID := vals["snapshot-id"]
		Expect(len(snapID)).To(BeNumerically(">", 36))
		snapImage := "csi-snap-" + snapID[len(snapID)-36:]
		data := exportSnapshot(ctx, snapID)
		Expect(bytes.Contains(data, pattern(snapshotFileSeed, 4096))).To(BeTrue(), "Ceph's copy of the snapshot lacks the file's first block")

		// The snapshot goes through the controller, as the snapshotter would.
		conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(controllerPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
		Expect(err).NotTo(HaveOccurred())
		defer func() { _ = conn.Close() }()
		ctrl := csispec.NewControllerClient(conn)
		_, err = ctrl.DeleteSnapshot(ctx, &csispec.DeleteSnapshotRequest{SnapshotId: snapID})
		Expect(err).NotTo(HaveOccurred())
		_, err = ceph.Admin(ctx, "rbd", "info", ceph.Pool+"/"+snapImage)
		Expect(err).To(HaveOccurred(), "the snapshot image is gone after DeleteSnapshot")
		// The snapshot taken while the guest kept writing is a prefix of
		// those writes, read from Ceph's own copy of it.
		checkPrefixSnapshot(ctx, vals)
		_, err = ctrl.DeleteSnapshot(ctx, &csispec.DeleteSnapshotRequest{SnapshotId: vals["prefix-snapshot-id"]})
		Expect(err).NotTo(HaveOccurred())
		// The scenario left the expanded volume for the check above.
		var secretMap map[string]string
		Expect(json.Unmarshal(secrets, &secretMap)).To(Succeed())
		_, err = ctrl.DeleteVolume(ctx, &csispec.DeleteVolumeRequest{VolumeId: expandedID, Secrets: secretMap})
		Expect(err).NotTo(HaveOccurred())
		_, err = ctrl.DeleteVolume(ctx, &csispec.DeleteVolumeRequest{VolumeId: vals["prefix-volume-id"], Secrets: secretMap})
		Expect(err).NotTo(HaveOccurred())
	})
})

// buildScenario builds testdata/csiscenario for the guest (static).
func buildScenario() string {
	GinkgoHelper()
	bin := filepath.Join(GinkgoT().TempDir(), "csiscenario")
	out, err := runGo(context.Background(), "build", "-o", bin, "./test/csi/testdata/csiscenario")
	Expect(err).NotTo(HaveOccurred(), "go build csiscenario: %s", out)
	return bin
}

// checkPrefixSnapshot: Ceph's copy of the snapshot csiscenario took while
// writing block after block holds blocks [0, k) stamped and nothing
// after, where k is at least the writes acknowledged before the snapshot
// was asked for and at most those acknowledged when it was answered, plus
// the one in flight.
func checkPrefixSnapshot(ctx context.Context, vals map[string]string) {
	GinkgoHelper()
	var before, after int
	_, err := fmt.Sscanf(vals["prefix-acked"], "%d,%d", &before, &after)
	Expect(err).NotTo(HaveOccurred(), "prefix-acked=%q", vals["prefix-acked"])
	data := exportSnapshot(ctx, vals["prefix-snapshot-id"])
	Expect(len(data)).To(BeNumerically(">=", prefixBlocks*4096))
	k := 0
	for k < prefixBlocks && bytes.Equal(data[k*4096:(k+1)*4096], prefixStamp(k)) {
		k++
	}
	Expect(bytes.Equal(data[k*4096:], make([]byte, len(data)-k*4096))).To(BeTrue(),
		"the snapshot holds blocks 0..%d stamped, then block %d is neither stamped nor empty, or data follows: not a prefix", k, k)
	Expect(k).To(BeNumerically(">=", before), "the snapshot lacks writes acknowledged before it was asked for")
	Expect(k).To(BeNumerically("<=", after+1), "the snapshot holds writes issued after it was answered")
	GinkgoWriter.Printf("snapshot under writes: prefix of %d blocks (acknowledged %d when asked, %d when answered)\n", k, before, after)
}

// exportSnapshot is Ceph's own copy of CSI snapshot id (`rbd export` of
// the snapshot of its image, read by Ceph's tools).
func exportSnapshot(ctx context.Context, id string) []byte {
	GinkgoHelper()
	Expect(len(id)).To(BeNumerically(">", 36))
	image := "csi-snap-" + id[len(id)-36:]
	export := filepath.Join(GinkgoT().TempDir(), image+".export")
	out, err := ceph.Admin(ctx, "rbd", "export", "--no-progress", ceph.Pool+"/"+image+"@"+image, export)
	Expect(err).NotTo(HaveOccurred(), "rbd export %s: %s", image, out)
	data, err := os.ReadFile(export)
	Expect(err).NotTo(HaveOccurred())
	return data
}

// prefixBlocks and prefixStamp are csiscenario's PrefixBlocks and PrefixStamp.
const prefixBlocks = 8192

func prefixStamp(i int) []byte {
	line := fmt.Sprintf("rackcache-prefix-block-%08d\n", i)
	b := make([]byte, 0, 4096)
	for len(b) < 4096 {
		b = append(b, line...)
	}
	return b[:4096]
}

// pattern is csiscenario's Pattern: a SHA-256 chain of n bytes.
func pattern(seed string, n int) []byte {
	out := make([]byte, 0, n+32)
	h := sha256.Sum256([]byte(seed))
	for len(out) < n {
		out = append(out, h[:]...)
		h = sha256.Sum256(h[:])
	}
	return out[:n]
}
