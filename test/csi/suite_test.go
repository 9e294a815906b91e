// Package csi is the CSI driver's suite: csi-sanity and data tests with
// every part real. A real kube-apiserver and etcd (envtest), a real
// one-node Ceph, the operator in-process with two stand-in cache servers
// (real dataplanes on 127.0.0.x, one per rack), the CSI controller as the
// real rackcache-csi process on the host, and the node plugin inside the
// qemu guest, where NodeStage runs nvme connect, mkfs and mount in the
// guest's kernel.
package csi

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	csispec "github.com/container-storage-interface/spec/lib/go/csi"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/operator"
	"github.com/rackcache/rackcache/test/framework"
	"github.com/rackcache/rackcache/test/framework/standin"
)

const (
	operatorNamespace = "rackcache-system"
	// poolName is the suite's CachePool; cephSecret the ceph-csi-shaped
	// Secret of its Ceph user (also given to csi-sanity as the secrets).
	poolName   = "csi"
	cephSecret = "ceph-csi-user"
	// The two racks, each with one stand-in cache server.
	rackA, rackB = "rack-a", "rack-b"
	// serverCacheMiB is each server's cache file.
	serverCacheMiB = 1024
)

// Bounded waits, named once; they bound liveness, never assert speed.
const (
	setupTimeout    = time.Minute
	convergeTimeout = 2 * time.Minute
	poll            = 500 * time.Millisecond
	// guestTimeout bounds a whole guest job (boot, csi-sanity).
	guestTimeout = 40 * time.Minute
)

// The stand-in servers: node, address and rack.
var serversIn = []struct{ node, ip, rack string }{
	{"cache-a", "127.0.0.12", rackA},
	{"cache-b", "127.0.0.13", rackB},
}

// Shared by every spec.
var (
	k8s     client.Client
	ceph    *framework.Ceph
	cluster *standin.Cluster
	pool    *rcv1.CachePool
	// nvmePort is the pool's NVMe/TCP port on each server's address.
	nvmePort int
	// controllerPort is the CSI controller's gRPC port on 127.0.0.1.
	controllerPort int
	// nodeBinary is rackcache-csi built without cgo, for the guest.
	nodeBinary string
	// apiConfig reaches envtest's apiserver (the guest's node plugin
	// gets a copy through a forward).
	apiConfig *rest.Config
)

func TestCSI(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "csi")
}

var _ = BeforeSuite(func() {
	tb := GinkgoTB()
	// The operator's errors only: its info lines would bury the guest's.
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.Level(zapcore.ErrorLevel)))
	_, cfg := framework.StartEnvtest(tb, filepath.Join(framework.RepoRoot(), "config", "crd", "bases"))
	apiConfig = cfg
	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(rcv1.AddToScheme(scheme)).To(Succeed())
	var err error
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	ceph = framework.StartCeph(tb)
	ctx := context.Background()
	// Format-2 clones (snapshots restore through them) need clients of
	// mimic or later; docs/csi.md says so for real clusters too.
	out, err := ceph.Admin(ctx, "ceph", "osd", "set-require-min-compat-client", "mimic", "--yes-i-really-mean-it")
	Expect(err).NotTo(HaveOccurred(), "require mimic clients: %s", out)

	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}})).To(Succeed())
	Expect(k8s.Create(ctx, standin.CephUserSecret(ceph, operatorNamespace, cephSecret))).To(Succeed())
	cluster = &standin.Cluster{
		Client:       k8s,
		Namespace:    operatorNamespace,
		RPCPort:      framework.FreeLoopbackPort(tb),
		MetricsPort:  framework.FreeLoopbackPort(tb),
		SetupTimeout: setupTimeout,
		Poll:         poll,
	}
	opts := operator.DefaultOptions()
	opts.StatusInterval = 2 * time.Second
	opts.ServerLostGrace = 10 * time.Second
	opts.DataplaneTimeout = 20 * time.Second
	// The stand-in servers run the local build, named by a test image.
	opts.Admission.ImagePrefixes = append(opts.Admission.ImagePrefixes, standin.TestImage)
	cluster.StartOperator(cfg, scheme, opts)

	nvmePort = framework.FreeLoopbackPort(tb)
	pool = createPool(ctx)
	for _, s := range serversIn {
		cluster.StartServer(ctx, standin.ServerInput{Pool: pool, Node: s.node, IP: s.ip, Rack: s.rack, CacheMiB: serverCacheMiB})
	}
	cluster.SyncDaemonSetStatus(ctx, pool, int32(len(serversIn)))
	Eventually(func(g Gomega) {
		var p rcv1.CachePool
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: poolName}, &p)).To(Succeed())
		g.Expect(p.Status.ReadyServers).To(BeEquivalentTo(len(serversIn)))
	}).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed(), "pool %s has its servers ready", poolName)

	// The controller: the real binary, as its Deployment runs it.
	controllerPort = framework.FreeLoopbackPort(tb)
	framework.StartProcess(tb, framework.CSIBinary(tb, false),
		"--mode", "controller",
		"--endpoint", "tcp://127.0.0.1:"+strconv.Itoa(controllerPort),
		"--kubeconfig", framework.WriteKubeconfig(tb, cfg),
		"--probe-listen", "",
		"--volume-ready-timeout", "90s",
		"--zap-log-level", "info",
	)
	waitControllerReady(ctx)
	nodeBinary = framework.CSIBinary(tb, true)
})

// createPool creates the suite's CachePool: explicit monitors with the
// Ceph user Secret, write-back, servers labelled for it.
func createPool(ctx context.Context) *rcv1.CachePool {
	GinkgoHelper()
	p := &rcv1.CachePool{
		ObjectMeta: metav1.ObjectMeta{Name: poolName},
		Spec: rcv1.CachePoolSpec{
			NodeSelector: map[string]string{standin.PoolNodeLabel: poolName},
			Devices:      []rcv1.CacheDevice{{Path: "/dev/disk/by-id/nvme-rackcache-test-cache0"}},
			Port:         int32(nvmePort),
			WriteMode:    rcv1.WriteBack,
			Ceph: rcv1.CephBackend{
				Monitors:  []string{ceph.MonV1},
				SecretRef: &rcv1.SecretReference{Name: cephSecret, Namespace: operatorNamespace},
			},
			Image: "rackcache/dataplane:test",
			// csi-sanity can pass only fixed secrets, not each volume's
			// host keys, and no kubelet runs here to fetch them: this suite
			// attaches by host NQN. The kubelet's path (node-stage and
			// node-publish secrets, rotation on republish) is the e2e
			// suite's, and DH-HMAC-CHAP in the guest's kernel is
			// test/operator's and test/dataplane's.
			DataPath: rcv1.DataPath{Authentication: rcv1.HostAuthenticationNone},
		},
	}
	Expect(k8s.Create(ctx, p)).To(Succeed())
	return p
}

// guestPortals are the guest's ports forwarded to each server's NVMe/TCP
// listener, and the node plugin's --portal-map flags for them.
func guestPortals() (map[int]string, []string) {
	fwd := map[int]string{}
	var flags []string
	for i, s := range serversIn {
		gport := 4420 + i
		fwd[gport] = fmt.Sprintf("%s:%d", s.ip, nvmePort)
		flags = append(flags, "--portal-map", fmt.Sprintf("%s:%d=10.0.3.100:%d", s.ip, nvmePort, gport))
	}
	return fwd, flags
}

// waitControllerReady waits until the controller's Probe answers ready
// (it is ready once the apiserver answers).
func waitControllerReady(ctx context.Context) {
	GinkgoHelper()
	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(controllerPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close() }()
	Eventually(func(g Gomega) {
		resp, err := csispec.NewIdentityClient(conn).Probe(ctx, &csispec.ProbeRequest{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.GetReady().GetValue()).To(BeTrue())
	}).WithTimeout(setupTimeout).WithPolling(poll).Should(Succeed(), "the CSI controller answers Probe, ready")
}
