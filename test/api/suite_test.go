// Package api specifies the CRDs against a real kube-apiserver (envtest):
// valid objects are accepted with their defaults, every marker and CEL rule
// rejects a violating object with the message that says what to fix, the
// samples are accepted, and `kubectl get` prints the documented columns.
package api

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/test/framework"
)

func TestAPI(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "CRD validation")
}

var (
	// k8s talks to the suite's apiserver, restConfig reaches it directly.
	k8s        client.Client
	restConfig *rest.Config
)

// crdDir holds the generated CRDs the apiserver serves.
var crdDir = filepath.Join(framework.RepoRoot(), "config", "crd", "bases")

var _ = BeforeSuite(func() {
	// One apiserver for the whole suite; GinkgoTB's cleanup stops it after
	// the last spec, also when specs failed.
	_, restConfig = framework.StartEnvtest(GinkgoTB(), crdDir)
	scheme := runtime.NewScheme()
	Expect(rcv1.AddToScheme(scheme)).To(Succeed())
	var err error
	k8s, err = client.New(restConfig, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
})

func validPool(name string) *rcv1.CachePool {
	return &rcv1.CachePool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: rcv1.CachePoolSpec{
			NodeSelector: map[string]string{"rackcache.io/cache-server": "true"},
			Devices:      []rcv1.CacheDevice{{Path: "/dev/nvme1n1", Size: ptr.To(resource.MustParse("800Gi"))}},
			Ceph: rcv1.CephBackend{
				Monitors:  []string{"10.0.0.1:6789", "[fd00::1]:3300"},
				SecretRef: &rcv1.SecretReference{Name: "ceph-user", Namespace: "rackcache-system"},
			},
			Image: "rackcache/dataplane:dev",
		},
	}
}

func validVolume(name string) *rcv1.CachedVolume {
	return &rcv1.CachedVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: rcv1.CachedVolumeSpec{
			PoolName: "fast",
			RBD:      rcv1.RBDImage{Pool: "rbd", Image: "csi-vol-" + name},
			Size:     resource.MustParse("100Gi"),
		},
	}
}

// objectNamePart turns a policy such as auto:s3fifo+lru2 into something an
// object name may contain (auto-s3fifo-lru2), so that each table entry
// creates its own object.
func objectNamePart(policy string) string {
	return strings.NewReplacer(":", "-", "+", "-", ".", "-").Replace(policy)
}

// create creates obj and deletes it when the spec ends.
func create(ctx context.Context, obj client.Object) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, obj)).To(Succeed(), "create %s", obj.GetName())
	DeferCleanup(func(ctx context.Context) { _ = k8s.Delete(ctx, obj) })
}

// expectCreateRejected wants the apiserver to refuse obj with a message
// containing want.
func expectCreateRejected(ctx context.Context, obj client.Object, want string) {
	GinkgoHelper()
	err := k8s.Create(ctx, obj)
	if err == nil {
		_ = k8s.Delete(ctx, obj)
	}
	Expect(err).To(MatchError(ContainSubstring(want)), "the apiserver must refuse %s with the rule's message", obj.GetName())
}

// expectUpdateRejected applies mutate to a fresh copy of v and wants the
// update refused with a message containing want.
func expectUpdateRejected(ctx context.Context, v *rcv1.CachedVolume, mutate func(*rcv1.CachedVolume), want string) {
	GinkgoHelper()
	w := &rcv1.CachedVolume{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(v), w)).To(Succeed())
	mutate(w)
	Expect(k8s.Update(ctx, w)).To(MatchError(ContainSubstring(want)), "the apiserver must refuse the update with the rule's message")
}
