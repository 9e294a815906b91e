package csi

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	cephbackend "github.com/rackcache/rackcache/controllers/ceph"
	"github.com/rackcache/rackcache/test/framework"
)

// guestControllerPort is the guest's port forwarded to the controller.
const guestControllerPort = 9000

// sanityJob runs the node plugin in the guest and csi-sanity against it
// and the host's controller. Arguments: the node plugin's extra flags, the
// controller's guest port.
const sanityJob = `
modprobe ext4 && modprobe xfs || echo "modules=failed"
mkdir -p /tmp/csi
rackcache-csi --mode node --endpoint unix:///tmp/csi/node.sock --node-name guest --rack rack-a \
	--registration-dir "" --probe-listen "" --hostnqn-file /etc/nvme/hostnqn %s >/tmp/node.log 2>&1 &
i=0; while [ ! -S /tmp/csi/node.sock ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
csi-sanity --csi.endpoint /tmp/csi/node.sock --csi.controllerendpoint 10.0.3.100:%d \
	--csi.testvolumeparameters /job/params.yaml --csi.secrets /job/secrets.yaml \
	--csi.testvolumesize 67108864 --csi.testvolumeexpandsize 134217728 \
	--csi.mountdir /tmp/sanity-mount --csi.stagingdir /tmp/sanity-stage \
	--ginkgo.no-color --ginkgo.junit-report /tmp/junit.xml --ginkgo.timeout 30m
echo "sanity=$?"
grep -o '<testcase name="[^"]*"[^>]*status="[a-z]*"' /tmp/junit.xml | sed 's/<testcase name="\([^"]*\)".*status="\([a-z]*\)"/CASE \2 \1/'
echo "--- node plugin log (tail)"
tail -n 60 /tmp/node.log
`

var _ = Describe("csi-sanity", func() {
	It("passes with the controller on the host and the node plugin in the guest's kernel", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		params := filepath.Join(dir, "params.yaml")
		writeYAML(params, map[string]string{
			"cachePool": poolName, "pool": ceph.Pool, "cacheSize": "25%", "writeMode": "WriteBack",
		})
		// Every call that takes secrets gets the ceph-csi-shaped user.
		user := map[string]string{cephbackend.UserIDKey: ceph.User, cephbackend.UserKeyKey: ceph.Key}
		secrets := filepath.Join(dir, "secrets.yaml")
		writeYAML(secrets, map[string]map[string]string{
			"CreateVolumeSecret": user, "DeleteVolumeSecret": user, "ControllerExpandVolumeSecret": user,
			"CreateSnapshotSecret": user, "DeleteSnapshotSecret": user, "ListSnapshotsSecret": user,
		})
		fwd, portalFlags := guestPortals()
		res := framework.RunGuest(GinkgoTB(), framework.GuestOptions{
			Script:          fmt.Sprintf(sanityJob, strings.Join(portalFlags, " "), guestControllerPort),
			Files:           map[string]string{params: "/job/params.yaml", secrets: "/job/secrets.yaml"},
			Binaries:        append([]string{nodeBinary + ":/usr/local/bin/rackcache-csi", framework.RequireCommand(GinkgoTB(), "csi-sanity")}, fsTools()...),
			GuestForwards:   map[int]int{guestControllerPort: controllerPort},
			GuestForwardsTo: fwd,
			Timeout:         guestTimeout,
			MemoryMB:        1536,
		})
		out := res.Output
		summary := regexp.MustCompile(`(?m)^.*Passed \| \d+ Failed \| \d+ Pending \| \d+ Skipped.*$`).FindString(out)
		GinkgoWriter.Printf("csi-sanity: %s\n", summary)
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "CASE skipped") || strings.HasPrefix(line, "CASE failed") {
				GinkgoWriter.Println(line)
			}
		}
		vals := framework.GuestValues(GinkgoTB(), out)
		Expect(vals).NotTo(HaveKey("modules"), "the guest loads ext4 and xfs")
		Expect(vals).To(HaveKeyWithValue("sanity", "0"), "csi-sanity's exit status (%s)", summary)
		Expect(summary).To(MatchRegexp(`\b0 Failed\b`))
		Expect(strings.Count(out, "CASE passed")).To(BeNumerically(">", 50), "csi-sanity ran its cases")
	})
})

// fsTools are the host's filesystem tools the node plugin runs through
// k8s.io/mount-utils (busybox has none of them, or other flags).
func fsTools() []string {
	var out []string
	for _, name := range []string{"blkid", "mkfs.ext4", "mkfs.xfs", "resize2fs", "xfs_growfs", "e2fsck", "mount", "umount"} {
		p := framework.RequireCommand(GinkgoTB(), name)
		out = append(out, p)
	}
	// mount-utils runs "fsck" for ext4; e2fsck is that check.
	out = append(out, framework.RequireCommand(GinkgoTB(), "e2fsck")+":/usr/local/sbin/fsck")
	return out
}

func writeYAML(path string, v any) {
	GinkgoHelper()
	b, err := yaml.Marshal(v)
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(path, b, 0o600)).To(Succeed())
}
