// Package operator is the operator's envtest suite: a real kube-apiserver
// and etcd, a real one-node Ceph, the operator running in-process, and real
// rackcache-dataplane processes on 127.0.0.x standing in for the pods of the
// dataplane DaemonSet (there is no kubelet: the suite creates the Nodes and
// Pods a kubelet would report, see cluster_test.go).
package operator

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/operator"
	"github.com/rackcache/rackcache/test/framework"
	"github.com/rackcache/rackcache/test/framework/standin"
)

// operatorNamespace holds the pools' DaemonSets, Secrets, ConfigMaps and
// the stand-in dataplane pods.
const operatorNamespace = "rackcache-system"

// The operator's intervals, short so that the specs see status, loss and
// recovery within seconds.
const (
	statusInterval   = 2 * time.Second
	serverLostGrace  = 5 * time.Second
	dataplaneTimeout = 20 * time.Second
)

// Bounded waits of the specs, named once. They bound liveness only: a
// spec never asserts how fast something happened.
const (
	// setupTimeout: the operator creates a pool's Secrets and ConfigMap.
	setupTimeout = time.Minute
	// convergeTimeout: a pool or volume reaches the state the spec waits
	// for (several status intervals plus dataplane and Ceph calls).
	convergeTimeout = 2 * time.Minute
	// deleteTimeout: a volume's finalizer flushes and tears down.
	deleteTimeout = 3 * time.Minute
	// failedCleanupTimeout: the same after a spec failed (its servers may
	// be gone, so the finalizer may never finish).
	failedCleanupTimeout = 20 * time.Second
	// holdPeriod: how long Consistently watches a state that must stay
	// (longer than the grace period plus two status intervals).
	holdPeriod = serverLostGrace + 3*statusInterval
	poll       = 500 * time.Millisecond
)

// Shared by every spec: one apiserver, one Ceph, one operator.
var (
	k8s  client.Client
	ceph *framework.Ceph
	// cluster runs the stand-in cache servers (test/framework/standin).
	cluster *standin.Cluster
	// nvmePort is the dataplanes' NVMe/TCP port: a free port rather than
	// the production one (each server has an address of its own).
	nvmePort int
)

func TestOperator(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "operator")
}

var _ = BeforeSuite(func() {
	tb := GinkgoTB()
	ctrl.SetLogger(GinkgoLogr)
	_, cfg := framework.StartEnvtest(tb, filepath.Join(framework.RepoRoot(), "config", "crd", "bases"))

	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(rcv1.AddToScheme(scheme)).To(Succeed())
	var err error
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	ceph = framework.StartCeph(tb)
	cluster = &standin.Cluster{
		Client:       k8s,
		Namespace:    operatorNamespace,
		RPCPort:      framework.FreeLoopbackPort(tb),
		MetricsPort:  framework.FreeLoopbackPort(tb),
		SetupTimeout: setupTimeout,
		Poll:         poll,
	}
	nvmePort = framework.FreeLoopbackPort(tb)

	ctx := context.Background()
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}})).To(Succeed())
	createCephUserSecret(ctx)

	opts := operator.DefaultOptions()
	opts.StatusInterval = statusInterval
	opts.ServerLostGrace = serverLostGrace
	opts.DataplaneTimeout = dataplaneTimeout
	// The stand-in servers run the local build, named by a test image.
	opts.Admission.ImagePrefixes = append(opts.Admission.ImagePrefixes, standin.TestImage)
	cluster.StartOperator(cfg, scheme, opts)
})
