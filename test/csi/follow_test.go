package csi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	cephbackend "github.com/rackcache/rackcache/controllers/ceph"
	"github.com/rackcache/rackcache/test/framework"
)

// guestAPIPort is where the guest reaches envtest's apiserver.
const guestAPIPort = 6443

// followJob runs the node plugin with the Kubernetes API (a kubeconfig
// through a forward) and testdata/csiscenario's path-following scenario.
const followJob = `
mkdir -p /tmp/csi
rackcache-csi --mode node --endpoint unix:///tmp/csi/node.sock --node-name guest --rack rack-a \
	--registration-dir "" --probe-listen "" --kubeconfig /job/kubeconfig --follow-paths 5s %s >/tmp/node.log 2>&1 &
i=0; while [ ! -S /tmp/csi/node.sock ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
csiscenario -follow %s
echo "scenario-exit=$?"
echo "--- node plugin log (tail)"
tail -n 40 /tmp/node.log
`

var _ = Describe("A staged volume's paths", func() {
	It("follow its CachedVolume without a new publish: a removed mirror's path goes, a placed mirror's path comes", func(ctx SpecContext) {
		scenario := buildScenario()
		params, _ := json.Marshal(map[string]string{"cachePool": poolName, "pool": ceph.Pool, "cacheSize": "25%"})
		secrets, _ := json.Marshal(map[string]string{cephbackend.UserIDKey: ceph.User, cephbackend.UserKeyKey: ceph.Key})
		fwd, portalFlags := guestPortals()
		flags := fmt.Sprintf("-controller 10.0.3.100:%d -params '%s' -secrets '%s' -rack %s", guestControllerPort, params, secrets, rackA)
		DeferCleanup(func(ctx SpecContext) { setReplicas(ctx, nil) })

		res := framework.RunGuestWithSteps(GinkgoTB(), framework.GuestOptions{
			Script:          fmt.Sprintf(followJob, strings.Join(portalFlags, " "), flags),
			Binaries:        []string{nodeBinary + ":/usr/local/bin/rackcache-csi", scenario},
			Files:           map[string]string{guestKubeconfig(): "/job/kubeconfig"},
			GuestForwards:   map[int]int{guestControllerPort: controllerPort, guestAPIPort: apiPort()},
			GuestForwardsTo: fwd,
			Timeout:         guestTimeout,
		}, func(step string) error {
			switch step {
			case "mirror-off":
				one := int32(1)
				setReplicas(ctx, &one)
				return waitPaths(ctx, "every volume down to its owner's path", func(cvs []rcv1.CachedVolume) bool {
					for _, cv := range cvs {
						if len(cv.Status.Paths) != 1 {
							return false
						}
					}
					return len(cvs) > 0
				})
			case "mirror-on":
				setReplicas(ctx, nil)
				return waitPaths(ctx, "a mirror placed again", func(cvs []rcv1.CachedVolume) bool {
					for _, cv := range cvs {
						if len(cv.Status.Paths) == 2 && meta.IsStatusConditionTrue(cv.Status.Conditions, rcv1.ConditionMirrored) {
							return true
						}
					}
					return false
				})
			}
			return fmt.Errorf("unknown step %s", step)
		})
		vals := framework.GuestValues(GinkgoTB(), res.Output)
		Expect(vals).NotTo(HaveKey("failed"), "a scenario step failed")
		Expect(vals).To(HaveKeyWithValue("scenario-exit", "0"))
		Expect(vals).To(HaveKeyWithValue("follow-published-paths", "2"), "a write-through volume is published with its owner's and its mirror's path")
		Expect(vals).To(HaveKeyWithValue("follow-staged-paths", "2"))
		Expect(vals).To(HaveKeyWithValue("follow-after-mirror-off", "1"), "the removed mirror's path was disconnected")
		Expect(vals).To(HaveKeyWithValue("follow-io-one-path", "true"))
		Expect(vals).To(HaveKeyWithValue("follow-after-mirror-on", "2"), "the placed mirror's path was connected")
		Expect(vals).To(HaveKeyWithValue("follow-io-two-paths", "true"))
		Expect(vals).To(HaveKeyWithValue("scenario", "done"))
		GinkgoWriter.Printf("paths followed after the CachedVolume changed: mirror's path gone in %s ms, back in %s ms\n",
			vals["follow-off-ms"], vals["follow-on-ms"])
	})
})

// setReplicas sets (nil: unsets) the pool's replicas.
func setReplicas(ctx context.Context, n *int32) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var p rcv1.CachePool
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: poolName}, &p)).To(Succeed())
		p.Spec.Replicas = n
		g.Expect(k8s.Update(ctx, &p)).To(Succeed())
	}).WithTimeout(setupTimeout).WithPolling(poll).Should(Succeed())
}

// waitPaths waits until the CachedVolumes satisfy cond.
func waitPaths(ctx context.Context, what string, cond func([]rcv1.CachedVolume) bool) error {
	deadline := time.Now().Add(convergeTimeout)
	for time.Now().Before(deadline) {
		var list rcv1.CachedVolumeList
		if err := k8s.List(ctx, &list); err == nil && cond(list.Items) {
			return nil
		}
		time.Sleep(poll)
	}
	return fmt.Errorf("%s: not after %v", what, convergeTimeout)
}

// apiPort is envtest's apiserver port on 127.0.0.1.
func apiPort() int {
	GinkgoHelper()
	u, err := url.Parse(apiConfig.Host)
	Expect(err).NotTo(HaveOccurred())
	var port int
	_, err = fmt.Sscanf(u.Port(), "%d", &port)
	Expect(err).NotTo(HaveOccurred(), "apiserver %s", apiConfig.Host)
	return port
}

// guestKubeconfig reaches the apiserver through the guest's forward; its
// serving certificate names localhost.
func guestKubeconfig() string {
	cfg := rest.CopyConfig(apiConfig)
	cfg.Host = fmt.Sprintf("https://10.0.3.100:%d", guestAPIPort)
	cfg.ServerName = "localhost"
	return framework.WriteKubeconfig(GinkgoTB(), cfg)
}
