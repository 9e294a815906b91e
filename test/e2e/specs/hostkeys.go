package specs

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2" //nolint:revive,staticcheck // ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive,staticcheck // gomega's DSL reads best unqualified
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// rotationTimeout bounds a key rotation's way to the node: the operator's
// next pass, then the kubelet's next republish of the volume.
const rotationTimeout = 4 * time.Minute

// AuthSuccesses is how many DH-HMAC-CHAP transactions the pool's servers
// completed for the volume's subsystem
// (rackcache_nvmf_auth_successes_total).
func AuthSuccesses(ctx context.Context, g Gomega, env Env, pool string, v *Volume) int {
	series := fmt.Sprintf(`rackcache_nvmf_auth_successes_total{subnqn="%s"} `, nqnPrefix+v.CachedVolume)
	total := 0
	for _, body := range DataplaneMetrics(ctx, g, env, pool) {
		for _, line := range strings.Split(body, "\n") {
			if value, ok := strings.CutPrefix(line, series); ok {
				n, err := strconv.ParseFloat(value, 64)
				g.Expect(err).NotTo(HaveOccurred(), "%s", line)
				total += int(n)
			}
		}
	}
	return total
}

// ExpectHostAuthenticated checks that the node holding the volume proved
// its key: the pool authenticates hosts by default, the kubelet handed the
// node plugin the volume's host keys (the StorageClass's node-stage
// secret), and the server counts the node's queues' transactions.
func ExpectHostAuthenticated(ctx context.Context, env Env, pool string, v *Volume) int {
	By("checking that the node authenticated to the server with the volume's DH-HMAC-CHAP keys")
	cv := v.GetCachedVolume(ctx, env)
	Expect(cv.Spec.HostKeysSecret).NotTo(BeEmpty(), "the CSI driver named no host keys Secret")
	n := AuthSuccesses(ctx, Default, env, pool, v)
	Expect(n).To(BeNumerically(">", 0), "no DH-HMAC-CHAP transaction completed for %s", v.CachedVolume)
	return n
}

// RotateHostKeys asks the operator for new keys (the rotate-host-keys
// annotation), waits for the Secret's next generation, then for the
// node's queues to authenticate again with it (the kubelet republishes the
// volume with the Secret's new content and the node plugin gives the keys
// to the kernel), the pod's volume mounted throughout.
func RotateHostKeys(ctx context.Context, env Env, pool string, v *Volume) {
	By("rotating the volume's host keys while it stays mounted")
	c := env.Cluster.Client
	before := AuthSuccesses(ctx, Default, env, pool, v)
	cv := v.GetCachedVolume(ctx, env)
	key := client.ObjectKey{Namespace: env.Cluster.Config.Namespace, Name: cv.Spec.HostKeysSecret}
	generation := func(g Gomega) string {
		sec := &corev1.Secret{}
		g.Expect(c.Get(ctx, key, sec)).To(Succeed())
		for k, val := range sec.Data {
			if strings.HasSuffix(k, ".generation") {
				return string(val)
			}
		}
		g.Expect(sec.Data).To(HaveKey(HaveSuffix(".generation")), "Secret %s", key)
		return ""
	}
	was := generation(Default)
	patch := client.MergeFrom(cv.DeepCopy())
	metav1.SetMetaDataAnnotation(&cv.ObjectMeta, rcv1.RotateHostKeysAnnotation, time.Now().UTC().Format(time.RFC3339Nano))
	Expect(c.Patch(ctx, cv, patch)).To(Succeed())
	Eventually(generation).WithContext(ctx).WithTimeout(rotationTimeout).WithPolling(poll).ShouldNot(Equal(was),
		"the operator did not rotate the keys in %s", key)
	Eventually(func(g Gomega) int { return AuthSuccesses(ctx, g, env, pool, v) }).
		WithContext(ctx).WithTimeout(rotationTimeout).WithPolling(poll).Should(BeNumerically(">", before),
		"the node did not authenticate again after the rotation (republish with the new keys)")
}

// ExpectTLS checks that the volume's host keys hold a TLS PSK and that the
// node's kernel reaches the volume's subsystem over TLS: its controller
// shows the key it negotiated with (sysfs tls_key, the keyring serial of
// the PSK the node plugin inserted and tlshd used).
func ExpectTLS(ctx context.Context, env Env, v *Volume) {
	By("checking that the node reaches the volume over NVMe/TCP TLS with the volume's PSK")
	cv := v.GetCachedVolume(ctx, env)
	sec := &corev1.Secret{}
	key := client.ObjectKey{Namespace: env.Cluster.Config.Namespace, Name: cv.Spec.HostKeysSecret}
	Expect(env.Cluster.Client.Get(ctx, key, sec)).To(Succeed())
	Expect(sec.Data).To(HaveKey(HaveSuffix(".tls-psk")), "Secret %s holds no TLS PSK", key)
	nqn := nqnPrefix + v.CachedVolume
	script := `for c in /sys/class/nvme/nvme*; do [ "$(busybox cat $c/subsysnqn)" = "$0" ] && echo "tls_key=$(busybox cat $c/tls_key)"; done; true`
	out := nodeExec(ctx, env, v.Input.Namespace, v.Input.Name, "sh", "-c", script, nqn)
	Expect(out).To(MatchRegexp(`tls_key=[0-9a-f]+`), "the node's controller of %s shows no TLS key: %q", nqn, out)
}
