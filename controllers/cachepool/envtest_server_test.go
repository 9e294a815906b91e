package cachepool

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/controllers/servers"
	"github.com/rackcache/rackcache/test/framework"
)

// serverReadOverTLS stands in for the DaemonSet (envtest has no kubelet): a
// real dataplane started with the pool's ConfigMap and certificate on
// 127.0.0.1, reviewing the operator's tokens as node-a's server, a Node,
// and a dataplane Pod whose status points at it.
func serverReadOverTLS(t *testing.T, e *env) {
	g := NewWithT(t)
	dir := t.TempDir()
	const deviceBytes = 64 << 20
	pool := testPool("gamma")
	pool.UID, pool.Generation = "", 0
	pool.Spec.Devices = []rcv1.CacheDevice{{Path: filepath.Join(dir, "nvme0")}}
	g.Expect(os.WriteFile(pool.Spec.Devices[0].Path, nil, 0o600)).To(Succeed())
	g.Expect(os.Truncate(pool.Spec.Devices[0].Path, deviceBytes)).To(Succeed())
	g.Expect(e.c.Create(e.ctx, pool)).To(Succeed())

	var objs map[string]client.Object
	g.Eventually(func() error {
		var err error
		objs, err = e.ownedObjects("gamma")
		return err
	}).WithTimeout(wait).Should(Succeed())
	files := map[string][]byte{
		"config.json": []byte(objs["configmap"].(*corev1.ConfigMap).Data[ConfigKey]),
		"tls.crt":     secretData(objs["tls"], servers.TLSCertKey),
		"tls.key":     secretData(objs["tls"], servers.TLSKeyKey),
	}
	for name, data := range files {
		g.Expect(os.WriteFile(filepath.Join(dir, name), data, 0o400)).To(Succeed())
	}
	dp := framework.StartDataplane(t, append([]string{"--config", filepath.Join(dir, "config.json"),
		"--rpc-listen", fmt.Sprintf("127.0.0.1:%d", e.r.Connector.Port),
		"--rpc-tls-cert", filepath.Join(dir, "tls.crt"), "--rpc-tls-key", filepath.Join(dir, "tls.key")},
		framework.MustServerReviewArgs(t, e.c, e.cfg, operatorNS, "gamma", "node-a")...)...)

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{rcv1.DefaultRackLabel: "rack-a"}}}
	g.Expect(e.c.Create(e.ctx, node)).To(Succeed())
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	g.Expect(e.c.Status().Update(e.ctx, node)).To(Succeed())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "dataplane-gamma-a", Namespace: operatorNS, Labels: servers.Labels("gamma")},
		Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: containerName, Image: pool.Spec.Image}}},
	}
	g.Expect(e.c.Create(e.ctx, pod)).To(Succeed())
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = "127.0.0.1"
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	g.Expect(e.c.Status().Update(e.ctx, pod)).To(Succeed())

	g.Eventually(func(g Gomega) {
		p := e.pool(g, "gamma")
		g.Expect(p.Status.ReadyServers).To(Equal(int32(1)))
		g.Expect(p.Status.TotalServers).To(Equal(int32(1)))
		g.Expect(p.Status.Servers).To(HaveLen(1))
		s := p.Status.Servers[0]
		g.Expect(s.NodeName).To(Equal("node-a"))
		g.Expect(s.Rack).To(Equal("rack-a"))
		g.Expect(s.Version).NotTo(BeEmpty())
		g.Expect(s.Capacity).NotTo(BeNil())
		g.Expect(s.Capacity.Value()).To(Equal(int64(deviceBytes)))
		g.Expect(p.Status.Capacity.Value()).To(Equal(int64(deviceBytes)))
		g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, rcv1.ConditionReady)).To(BeTrue())
		g.Expect(e.events(g, "gamma", EventServerReady)).NotTo(BeEmpty())
		g.Expect(gaugeValue("rackcache_server_ready", "gamma")).To(Equal(1.0))
	}).WithTimeout(wait).Should(Succeed())

	// The operator's token for another server of the pool, and node-a's
	// audience in another ServiceAccount's token: both refused by the
	// server, whatever their claims say, after the apiserver's review.
	otherNode, err := e.r.Connector.Client(e.ctx, "gamma", "node-b", "127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = otherNode.Version(e.ctx)
	g.Expect(err).To(MatchError(ContainSubstring("401")), "node-b's token at node-a's server")
	// node-b's token with its audience rewritten to node-a's: the claims
	// pass the server's own look, the signature does not pass the review.
	nodeB, err := e.r.Connector.Tokens.Token(e.ctx, servers.RPCAudience(operatorNS, "gamma", "node-b"))
	g.Expect(err).NotTo(HaveOccurred())
	cas, err := dataplane.CAPoolFromPEM(secretData(objs["tls"], servers.CACertKey))
	g.Expect(err).NotTo(HaveOccurred())
	forged := dataplane.NewHTTPClient(fmt.Sprintf("https://127.0.0.1:%d/", e.r.Connector.Port),
		rewriteAudience(g, nodeB, servers.RPCAudience(operatorNS, "gamma", "node-a")),
		dataplane.WithCAPool(cas), dataplane.WithServerName(servers.TLSServerName("gamma")))
	_, err = forged.Version(e.ctx)
	g.Expect(err).To(MatchError(ContainSubstring("401")), "a token with rewritten claims")
	stranger := *e.r.Connector
	stranger.Tokens = &servers.Tokens{Client: e.c, Namespace: operatorNS, ServiceAccount: servers.DataplaneServiceAccount}
	c, err := stranger.Client(e.ctx, "gamma", "node-a", "127.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.Version(e.ctx)
	g.Expect(err).To(MatchError(ContainSubstring("401")), "another ServiceAccount's token for node-a")

	dp.Stop(t)
	g.Eventually(func(g Gomega) {
		p := e.pool(g, "gamma")
		g.Expect(p.Status.ReadyServers).To(BeZero())
		g.Expect(p.Status.Servers).To(HaveLen(1))
		g.Expect(p.Status.Servers[0].Message).To(ContainSubstring("spdk_get_version"))
		c := meta.FindStatusCondition(p.Status.Conditions, rcv1.ConditionReady)
		g.Expect(c.Reason).To(Equal(rcv1.ReasonServersNotReady))
		g.Expect(e.events(g, "gamma", EventServerNotReady)).NotTo(BeEmpty())
		g.Expect(gaugeValue("rackcache_server_ready", "gamma")).To(Equal(0.0))
	}).WithTimeout(wait).Should(Succeed())
}

// rewriteAudience is token (a JWT) with its aud claim replaced and its
// signature kept: what an attacker holding one server's token would try.
func rewriteAudience(g Gomega, token, audience string) string {
	parts := strings.Split(token, ".")
	g.Expect(parts).To(HaveLen(3))
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	g.Expect(err).NotTo(HaveOccurred())
	var claims map[string]any
	g.Expect(json.Unmarshal(payload, &claims)).To(Succeed())
	claims["aud"] = []string{audience}
	payload, err = json.Marshal(claims)
	g.Expect(err).NotTo(HaveOccurred())
	parts[1] = base64.RawURLEncoding.EncodeToString(payload)
	return strings.Join(parts, ".")
}

// gaugeValue is the value of the single series of metric name for pool
// (-1 when there is not exactly one).
func gaugeValue(name, pool string) float64 {
	families, err := metrics.Registry.Gather()
	if err != nil {
		return -1
	}
	var values []float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pool" && l.GetValue() == pool {
					values = append(values, m.GetGauge().GetValue())
				}
			}
		}
	}
	if len(values) != 1 {
		return -1
	}
	return values[0]
}
