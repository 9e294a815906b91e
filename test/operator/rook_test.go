package operator

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rackcache/rackcache/controllers/servers"
	"github.com/rackcache/rackcache/test/framework/standin"
)

// A pool backed by a Rook CephCluster: the operator reads the monitors from
// Rook's ConfigMap and the user from Rook's CSI Secrets, created here in a
// namespace exactly as Rook creates them.
var _ = Describe("A CachePool backed by Rook", func() {
	It("resolves monitors and keys from Rook's ConfigMap and Secrets, and its volume becomes Ready without the key on the server's disk", func(ctx SpecContext) {
		const rookNamespace = "rook-ceph"
		createRookObjects(ctx, rookNamespace)
		pool := createPool(ctx, poolInput{Name: "rook", RookNamespace: rookNamespace})
		srv := cluster.StartServer(ctx, standin.ServerInput{Pool: pool, Node: "rook-1", IP: "127.0.0.4", Rack: "rack-r", CacheMiB: 128})
		cluster.SyncDaemonSetStatus(ctx, pool, 1)
		waitPoolReady(ctx, pool.Name, 1)

		// Ready means the dataplane opened the image through Ceph with the
		// monitors and key read from Rook's objects: there are no others.
		vol := createVolume(ctx, volumeInput{Name: "rook-vol", Pool: pool, SizeMiB: 64, CacheSize: "25%"})
		v := waitVolumeReady(ctx, vol.Name)
		Expect(v.Status.Server).To(Equal(srv.In.Node))
		Eventually(func(g Gomega) {
			b := expectServes(g, ctx, srv, v.Status.NQN, nil, "wt")
			g.Expect(b.CacheSizeMiB).To(BeEquivalentTo(16), "25%% of 64 MiB")
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())

		By("keeping the cephx key off the server's disk: it registered the cluster with the mounted keyring")
		Expect(string(srv.PersistedConfig())).To(ContainSubstring("bdev_rbd_register_cluster"), "the server persisted its Ceph registration")
		Expect(string(srv.PersistedConfig())).NotTo(ContainSubstring(ceph.Key), "the persisted configuration holds the cephx key")

		By("serving the server's metrics, which name the volume, only with the operator's scrape token")
		var scrape corev1.Secret
		Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: servers.MetricsTokenSecretName}, &scrape)).To(Succeed())
		url := fmt.Sprintf("http://%s/metrics", net.JoinHostPort(srv.In.IP, strconv.Itoa(cluster.MetricsPort)))
		for _, tc := range []struct {
			token string
			want  int
		}{{"", http.StatusUnauthorized}, {string(scrape.Data[servers.TokenKey]), http.StatusOK}} {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			Expect(err).NotTo(HaveOccurred())
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			Expect(resp.StatusCode).To(Equal(tc.want), "GET /metrics with a token: %t", tc.token != "")
			Expect(strings.Contains(string(body), vol.Name)).To(Equal(tc.want == http.StatusOK), "the volume's name in the answer")
		}

		By("keeping the cephx key out of status and Events")
		p := getPool(Default, ctx, pool.Name)
		for what, obj := range map[string]any{"pool status": p.Status, "volume status": getVolume(Default, ctx, vol.Name).Status} {
			b, err := json.Marshal(obj)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(b)).NotTo(ContainSubstring(ceph.Key), "the %s holds the cephx key", what)
		}
		for _, kind := range []string{"CachePool", "CachedVolume"} {
			for _, e := range eventsFor(Default, ctx, kind, map[string]string{"CachePool": pool.Name, "CachedVolume": vol.Name}[kind]) {
				Expect(e.Message).NotTo(ContainSubstring(ceph.Key), "Event %s on %s %s holds the cephx key", e.Reason, kind, e.InvolvedObject.Name)
			}
		}
	})
})
