package standin

// Stand-ins for what the kubelet and the DaemonSet controller would do: there
// is no kubelet in envtest, so a suite creates the Node of each cache
// server, runs the real dataplane on the node's address with the files the
// DaemonSet's pod would mount (the pool's TLS Secret, Ceph keyring, scrape
// token and ConfigMap, created by the operator; the dataplane
// ServiceAccount's token), and creates the dataplane Pod with the status a
// kubelet would report.

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	. "github.com/onsi/ginkgo/v2" //nolint:revive,staticcheck // ginkgo's DSL, as in every suite
	. "github.com/onsi/gomega"    //nolint:revive,staticcheck // gomega's DSL, as in every suite
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/servers"
	"github.com/rackcache/rackcache/test/framework"
)

// PoolNodeLabel selects a pool's nodes: each pool of the suite has its own
// servers, labelled PoolNodeLabel=<pool>.
const PoolNodeLabel = "rackcache.io/test-pool"

// configKey is the key of the pool's ConfigMap holding the dataplane's
// start-up configuration (what the DaemonSet passes to --config).
const configKey = "config.json"

// ServerInput says which cache server to stand in for.
type ServerInput struct {
	// Pool is the CachePool the server belongs to.
	Pool *rcv1.CachePool
	// Node names the Node; IP is its address (127.0.0.x: the loopback /8
	// answers on every address, so each server has one of its own).
	Node, IP string
	// Rack is the Node's rack label value ("" for none).
	Rack string
	// CacheMiB is the size of the server's cache file.
	CacheMiB int
	// Unready creates the pod not ready (its readiness probe not passed
	// yet): the server runs but is no candidate until setPodReady(true).
	Unready bool
	// CacheFS, when set, is a filesystem the real mkfs.<CacheFS> makes on
	// the cache file before the server starts: a device that is not blank.
	CacheFS string
}

// Server is one running stand-in cache server.
type Server struct {
	c  *Cluster
	In ServerInput
	// dir keeps what outlives a dataplane process: the cache file, the
	// persisted configuration and the credentials.
	dir                       string
	cacheFile, persistFile    string
	certFile, keyFile, cfg    string
	cephKeyring, metricsToken string
	DP                        *framework.Dataplane
}

// CacheFile is the file the server's cache device path maps to.
func (s *Server) CacheFile() string { return s.cacheFile }

// PodName is the stand-in dataplane pod's name.
func (s *Server) PodName() string { return servers.DaemonSetName(s.In.Pool.Name) + "-" + s.In.Node }

// StartServer creates the Node, waits for the operator's Secrets and
// ConfigMap of the pool, starts a real dataplane with them and creates the
// Ready dataplane Pod. Everything goes when the current spec or container
// ends (DeferCleanup).
func (c *Cluster) StartServer(ctx context.Context, in ServerInput) *Server {
	GinkgoHelper()
	dir, err := os.MkdirTemp("", "rackcache-server-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, dir)
	s := &Server{
		c:            c,
		In:           in,
		dir:          dir,
		cacheFile:    filepath.Join(dir, "cache.img"),
		persistFile:  filepath.Join(dir, "persisted.json"),
		certFile:     filepath.Join(dir, "tls.crt"),
		keyFile:      filepath.Join(dir, "tls.key"),
		cfg:          filepath.Join(dir, "config.json"),
		cephKeyring:  filepath.Join(dir, "ceph.keyring"),
		metricsToken: filepath.Join(dir, "metrics-token"),
	}
	c.createNode(ctx, in)
	s.writePoolFiles(ctx)
	Expect(os.WriteFile(s.cacheFile, nil, 0o600)).To(Succeed())
	Expect(os.Truncate(s.cacheFile, int64(in.CacheMiB)<<20)).To(Succeed())
	if in.CacheFS != "" {
		out, err := exec.Command("mkfs."+in.CacheFS, "-q", "-F", s.cacheFile).CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "mkfs.%s (hack/deps.sh installs it): %s", in.CacheFS, out)
	}
	s.start()
	s.createPod(ctx)
	return s
}

func (c *Cluster) createNode(ctx context.Context, in ServerInput) {
	GinkgoHelper()
	labels := map[string]string{PoolNodeLabel: in.Pool.Name}
	if in.Rack != "" {
		labels[RackLabel(in.Pool)] = in.Rack
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: in.Node, Labels: labels}}
	Expect(c.Client.Create(ctx, node)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(c.Client.Delete(ctx, node))).To(Succeed()) })
	node.Status = corev1.NodeStatus{
		Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: in.IP}},
		Conditions: []corev1.NodeCondition{nodeCondition(corev1.ConditionTrue)},
	}
	Expect(c.Client.Status().Update(ctx, node)).To(Succeed())
}

// RackLabel is the Node label holding a pool's racks.
func RackLabel(pool *rcv1.CachePool) string {
	if pool.Spec.Placement.RackLabel != "" {
		return pool.Spec.Placement.RackLabel
	}
	return rcv1.DefaultRackLabel
}

// writePoolFiles waits for the pool's TLS Secret, Ceph
// keyring Secret, the scrape token Secret and ConfigMap (the operator creates them) and writes what
// the pod would mount.
func (s *Server) writePoolFiles(ctx context.Context) {
	GinkgoHelper()
	pool := s.In.Pool.Name
	var tls, keyring, scrape corev1.Secret
	var cm corev1.ConfigMap
	Eventually(func(g Gomega) {
		g.Expect(s.c.Client.Get(ctx, client.ObjectKey{Namespace: s.c.Namespace, Name: servers.TLSSecretName(pool)}, &tls)).To(Succeed())
		g.Expect(s.c.Client.Get(ctx, client.ObjectKey{Namespace: s.c.Namespace, Name: servers.ConfigMapName(pool)}, &cm)).To(Succeed())
		g.Expect(s.c.Client.Get(ctx, client.ObjectKey{Namespace: s.c.Namespace, Name: servers.CephKeyringSecretName(pool)}, &keyring)).To(Succeed())
		g.Expect(keyring.Data).To(HaveKey(servers.CephKeyringKey))
		g.Expect(s.c.Client.Get(ctx, client.ObjectKey{Namespace: s.c.Namespace, Name: servers.MetricsTokenSecretName}, &scrape)).To(Succeed())
		g.Expect(scrape.Data).To(HaveKey(servers.TokenKey))
		g.Expect(tls.Data).To(HaveKey(servers.TLSCertKey))
		g.Expect(tls.Data).To(HaveKey(servers.TLSKeyKey))
		g.Expect(cm.Data).To(HaveKey(configKey))
	}).WithContext(ctx).WithTimeout(s.c.SetupTimeout).WithPolling(s.c.Poll).Should(Succeed(),
		"the operator creates pool %s's TLS Secret, Ceph keyring Secret, scrape token and ConfigMap", pool)
	Expect(os.WriteFile(s.certFile, tls.Data[servers.TLSCertKey], 0o600)).To(Succeed())
	Expect(os.WriteFile(s.keyFile, tls.Data[servers.TLSKeyKey], 0o600)).To(Succeed())
	Expect(os.WriteFile(s.cephKeyring, keyring.Data[servers.CephKeyringKey], 0o600)).To(Succeed())
	Expect(os.WriteFile(s.metricsToken, scrape.Data[servers.TokenKey], 0o600)).To(Succeed())
	Expect(os.WriteFile(s.cfg, s.localConfig(cm.Data[configKey]), 0o600)).To(Succeed())
}

// localConfig is the pool's start-up configuration with every device path
// of the pool replaced by this server's own cache file. In a cluster each
// node has its own device at that path; here all servers share one host,
// and two dataplanes must never share a cache file (each would format and
// overwrite the other's cache data).
func (s *Server) localConfig(poolConfig string) []byte {
	GinkgoHelper()
	var doc any
	Expect(json.Unmarshal([]byte(poolConfig), &doc)).To(Succeed(), "the pool's %s is JSON", configKey)
	paths := map[string]bool{}
	for _, d := range s.In.Pool.Spec.Devices {
		paths[d.Path] = true
	}
	replaced := 0
	var walk func(v any) any
	walk = func(v any) any {
		switch t := v.(type) {
		case map[string]any:
			for k, e := range t {
				t[k] = walk(e)
			}
		case []any:
			for i, e := range t {
				t[i] = walk(e)
			}
		case string:
			if paths[t] {
				replaced++
				return s.cacheFile
			}
		}
		return v
	}
	doc = walk(doc)
	Expect(replaced).To(Equal(len(paths)), "the pool's %s names each cache device once:\n%s", configKey, poolConfig)
	out, err := json.Marshal(doc)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// start runs the dataplane with the server's files, as the pod's container
// would: JSON-RPC over TLS on the node's address, the operator's tokens
// reviewed by the apiserver for this server's audience, metrics there too, the pool's configuration at start and its own
// persisted configuration (which wins when present).
func (s *Server) start() {
	GinkgoHelper()
	review, err := framework.ServerReviewArgs(context.Background(), s.c.Client, s.c.api, s.c.Namespace, s.In.Pool.Name, s.In.Node, s.dir)
	Expect(err).NotTo(HaveOccurred())
	args := append([]string{
		"--rpc-listen", net.JoinHostPort(s.In.IP, strconv.Itoa(s.c.RPCPort)),
		"--rpc-tls-cert", s.certFile, "--rpc-tls-key", s.keyFile,
		"--metrics-listen", net.JoinHostPort(s.In.IP, strconv.Itoa(s.c.MetricsPort)),
		"--metrics-token-file", s.metricsToken,
		"--ceph-keyring", s.cephKeyring,
		"--config", s.cfg,
		"--config-persist", s.persistFile,
	}, review...)
	s.DP = framework.StartDataplane(GinkgoTB(), args...)
}

// PersistedConfig is the content of the server's --config-persist file,
// what a cache server keeps on its disk across restarts.
func (s *Server) PersistedConfig() []byte {
	GinkgoHelper()
	b, err := os.ReadFile(s.persistFile)
	Expect(err).NotTo(HaveOccurred(), "read the persisted configuration")
	return b
}

// createPod creates the dataplane pod the DaemonSet would have made on the
// node, with the status its kubelet would report once it runs.
func (s *Server) createPod(ctx context.Context) {
	GinkgoHelper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.PodName(), Namespace: s.c.Namespace, Labels: servers.Labels(s.In.Pool.Name)},
		Spec: corev1.PodSpec{
			NodeName:    s.In.Node,
			HostNetwork: true,
			Containers:  []corev1.Container{{Name: "dataplane", Image: s.In.Pool.Spec.Image}},
		},
	}
	Expect(s.c.Client.Create(ctx, pod)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(s.c.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)))).To(Succeed())
	})
	s.SetPodReady(ctx, !s.In.Unready)
}

// SetPodReady sets the pod's status as the kubelet would: running with
// the node's address, Ready as its readiness probe says.
func (s *Server) SetPodReady(ctx context.Context, ready bool) {
	GinkgoHelper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	Eventually(func(g Gomega) {
		var pod corev1.Pod
		g.Expect(s.c.Client.Get(ctx, client.ObjectKey{Namespace: s.c.Namespace, Name: s.PodName()}, &pod)).To(Succeed())
		pod.Status.Phase = corev1.PodRunning
		pod.Status.HostIP = s.In.IP
		pod.Status.PodIP = s.In.IP
		pod.Status.PodIPs = []corev1.PodIP{{IP: s.In.IP}}
		pod.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()},
			{Type: corev1.ContainersReady, Status: status, LastTransitionTime: metav1.Now()},
		}
		g.Expect(s.c.Client.Status().Update(ctx, &pod)).To(Succeed())
	}).WithContext(ctx).WithTimeout(s.c.SetupTimeout).WithPolling(s.c.Poll).Should(Succeed())
}

// SetNodeReady sets the Node's Ready condition, as its kubelet's heartbeat
// (or the node controller, once the heartbeats stop) would.
func (s *Server) SetNodeReady(ctx context.Context, ready bool) {
	GinkgoHelper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	Eventually(func(g Gomega) {
		var node corev1.Node
		g.Expect(s.c.Client.Get(ctx, client.ObjectKey{Name: s.In.Node}, &node)).To(Succeed())
		node.Status.Conditions = []corev1.NodeCondition{nodeCondition(status)}
		g.Expect(s.c.Client.Status().Update(ctx, &node)).To(Succeed())
	}).WithContext(ctx).WithTimeout(s.c.SetupTimeout).WithPolling(s.c.Poll).Should(Succeed())
}

func nodeCondition(status corev1.ConditionStatus) corev1.NodeCondition {
	now := metav1.Now()
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: now, LastTransitionTime: now}
}

// Kill ends the dataplane with SIGKILL, a crash: nothing is flushed or
// drained. The pod turns not ready, as its failing probe would make it.
func (s *Server) Kill(ctx context.Context) {
	GinkgoHelper()
	s.DP.Kill(GinkgoTB())
	s.SetPodReady(ctx, false)
}

// Restart starts the dataplane again with the same files, as the kubelet
// restarts a crashed container; forgetConfig first removes its persisted
// configuration (a node whose host path was lost), so only the pool's
// start-up configuration (the cache devices) is applied and the operator
// must create the volumes again, attaching to their cache data. The new
// process is stopped when the current spec ends.
func (s *Server) Restart(ctx context.Context, forgetConfig bool) {
	GinkgoHelper()
	if forgetConfig {
		Expect(os.Remove(s.persistFile)).To(Succeed(), "remove the persisted configuration")
	}
	s.start()
	s.SetPodReady(ctx, true)
}

// MarkLost makes the server lost: the process dies, the pod and the Node
// turn not ready (a node that lost power).
func (s *Server) MarkLost(ctx context.Context) {
	GinkgoHelper()
	s.DP.Kill(GinkgoTB())
	s.SetPodReady(ctx, false)
	s.SetNodeReady(ctx, false)
}

// CacheBytes is the size of the server's cache file as the dataplane
// reports it: the size of the cache device's bdev (read over the Unix
// socket, not through the operator).
func (s *Server) CacheBytes(ctx context.Context) uint64 {
	GinkgoHelper()
	var total uint64
	for i := range s.In.Pool.Spec.Devices {
		bdevs, err := s.DP.Client.Bdevs(ctx, servers.CacheBdevName(i))
		Expect(err).NotTo(HaveOccurred(), "bdev_get_bdevs %s on %s", servers.CacheBdevName(i), s.In.Node)
		Expect(bdevs).To(HaveLen(1))
		total += bdevs[0].SizeBytes()
	}
	return total
}

// SyncDaemonSetStatus reports the pool's DaemonSet as rolled out on its n
// nodes, as the DaemonSet controller (absent from envtest) would once the
// stand-in pods run.
func (c *Cluster) SyncDaemonSetStatus(ctx context.Context, pool *rcv1.CachePool, n int32) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var ds appsv1.DaemonSet
		g.Expect(c.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: servers.DaemonSetName(pool.Name)}, &ds)).To(Succeed())
		ds.Status = appsv1.DaemonSetStatus{
			ObservedGeneration:     ds.Generation,
			DesiredNumberScheduled: n,
			CurrentNumberScheduled: n,
			UpdatedNumberScheduled: n,
			NumberReady:            n,
			NumberAvailable:        n,
		}
		g.Expect(c.Client.Status().Update(ctx, &ds)).To(Succeed())
	}).WithContext(ctx).WithTimeout(c.SetupTimeout).WithPolling(c.Poll).Should(Succeed(), "the operator creates the DaemonSet of pool %s", pool.Name)
}
