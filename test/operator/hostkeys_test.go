package operator

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/cachedvolume"
	"github.com/rackcache/rackcache/controllers/hostkeys"
	"github.com/rackcache/rackcache/test/framework/standin"
)

// hostKeysOf waits for host's key pair in the Secret the operator keeps
// for volume (the pool authenticates hosts, the CRD's default).
func hostKeysOf(ctx context.Context, volume, host string) hostkeys.Pair {
	GinkgoHelper()
	name := cachedvolume.HostKeysSecretName(&rcv1.CachedVolume{ObjectMeta: metav1.ObjectMeta{Name: volume}})
	var pair hostkeys.Pair
	Eventually(func(g Gomega) {
		sec := &corev1.Secret{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: name}, sec)).To(Succeed())
		p, ok := hostkeys.Pairs(sec.Data)[host]
		g.Expect(ok).To(BeTrue(), "no keys for %s in Secret %s", host, name)
		pair = p
	}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())
	return pair
}

// expectAuthenticated checks that every queue of subsystem nqn on srv
// completed DH-HMAC-CHAP (nvmf_subsystem_get_qpairs' auth object).
func expectAuthenticated(ctx context.Context, srv *standin.Server, nqn string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var qpairs []struct {
			Auth *struct {
				State string `json:"state"`
			} `json:"auth"`
		}
		g.Expect(srv.DP.Client.Call(ctx, "nvmf_subsystem_get_qpairs", map[string]string{"nqn": nqn}, &qpairs)).To(Succeed())
		g.Expect(qpairs).NotTo(BeEmpty(), "no queue of %s", nqn)
		for _, q := range qpairs {
			g.Expect(q.Auth).NotTo(BeNil(), "a queue of %s without authentication", nqn)
			g.Expect(q.Auth.State).To(Equal("completed"))
		}
	}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())
}
