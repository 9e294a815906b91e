// Package standin runs a rackcache cluster without kubelets for envtest
// suites: the operator in-process, and stand-in cache servers (real
// dataplanes on 127.0.0.x, with the Nodes and Pods a kubelet would
// report). The operator suite (test/operator) and the CSI suite
// (test/csi) share it.
package standin

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2" //nolint:revive,staticcheck // ginkgo's DSL, as in every suite
	. "github.com/onsi/gomega"    //nolint:revive,staticcheck // gomega's DSL, as in every suite
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cephbackend "github.com/rackcache/rackcache/controllers/ceph"
	"github.com/rackcache/rackcache/controllers/operator"
	"github.com/rackcache/rackcache/test/framework"
)

// Cluster is what the stand-ins share: the apiserver, the operator's
// namespace and the dataplanes' ports (free ports rather than the
// production ones, so that another test run on this machine using
// 127.0.0.x cannot collide; each server has an address of its own).
type Cluster struct {
	Client    client.Client
	Namespace string
	// RPCPort and MetricsPort are every stand-in dataplane's JSON-RPC and
	// metrics ports (on its own address).
	RPCPort, MetricsPort int
	// SetupTimeout bounds the waits for the operator's objects; Poll is
	// their interval.
	SetupTimeout, Poll time.Duration

	// api is the apiserver the servers review the operator's tokens with
	// (set by StartOperator).
	api *rest.Config
}

// TestImage is the image the suites' pools name: the stand-in servers run
// the local dataplane build whatever the pool says, and the operator's
// admission must let this name through (Options.Admission.ImagePrefixes).
const TestImage = "rackcache/dataplane:test"

// StartOperator runs the operator in-process as cmd/operator would, with
// opts (its Namespace and RPCPort set from the cluster), until the suite
// ends. Its metrics are read from controller-runtime's registry (no
// metrics server: nothing listens).
func (c *Cluster) StartOperator(cfg *rest.Config, scheme *runtime.Scheme, opts operator.Options) {
	GinkgoHelper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  operator.CacheOptions(c.Namespace),
		Client:                 operator.ClientOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	Expect(err).NotTo(HaveOccurred())
	// What config/rbac installs: the operator's identity, which the servers
	// let in, and theirs, which may review tokens.
	Expect(framework.CreateServiceAccounts(context.Background(), c.Client, c.Namespace)).To(Succeed())
	c.api = cfg
	opts.Namespace = c.Namespace
	opts.RPCPort = c.RPCPort
	Expect(operator.Setup(mgr, opts)).To(Succeed())

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() {
		defer GinkgoRecover()
		stopped <- mgr.Start(ctx)
	}()
	DeferCleanup(func() {
		cancel()
		Eventually(stopped).WithTimeout(time.Minute).Should(Receive(BeNil()), "the manager stops")
	})
}

// CephUserSecret is a Secret named name in namespace with ceph's user, in
// the keys both explicit pools and Rook's (and ceph-csi's) Secrets use.
func CephUserSecret(ceph *framework.Ceph, namespace, name string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Data: map[string][]byte{
			cephbackend.UserIDKey:  []byte(ceph.User),
			cephbackend.UserKeyKey: []byte(ceph.Key),
		},
	}
}
