package operator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cephbackend "github.com/rackcache/rackcache/controllers/ceph"
	"github.com/rackcache/rackcache/test/framework/standin"
)

// cephUserSecret holds the suite Ceph's restricted user (profile rbd on its
// pool) for pools with explicit monitors, as an admin would create it.
const cephUserSecret = "ceph-rackcache"

// createCephUserSecret writes the Ceph user into cephUserSecret.
func createCephUserSecret(ctx context.Context) {
	Expect(k8s.Create(ctx, cephUserSecretIn(operatorNamespace, cephUserSecret))).To(Succeed())
}

// cephUserSecretIn is a Secret named name in namespace with the suite Ceph's
// user, in the keys both explicit pools and Rook's CSI Secrets use.
func cephUserSecretIn(namespace, name string) *corev1.Secret {
	return standin.CephUserSecret(ceph, namespace, name)
}

// cephMonitor is the suite Ceph's monitor as a CachePool names it
// (host:port; the msgr1 address, which a bare host:port means to librados).
func cephMonitor() string { return ceph.MonV1 }

// createRookObjects makes namespace ns hold what Rook keeps there for its
// CSI driver: the monitors ConfigMap and the node and provisioner Secrets.
func createRookObjects(ctx context.Context, ns string) {
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	Expect(k8s.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: cephbackend.RookMonEndpoints, Namespace: ns},
		Data:       map[string]string{cephbackend.RookMonKey: "a=" + cephMonitor()},
	})).To(Succeed())
	Expect(k8s.Create(ctx, cephUserSecretIn(ns, cephbackend.RookNodeSecret))).To(Succeed())
	Expect(k8s.Create(ctx, cephUserSecretIn(ns, cephbackend.RookProvisionerSecret))).To(Succeed())
}

// createRbdImage creates an empty image of mib MiB in the suite's pool (the
// CSI controller's job in a cluster) and removes it when the spec ends.
func createRbdImage(ctx context.Context, image string, mib int) {
	out, err := ceph.Admin(ctx, "rbd", "create", "--size", fmt.Sprintf("%dM", mib), ceph.Pool+"/"+image)
	Expect(err).NotTo(HaveOccurred(), "create rbd image %s: %s", image, out)
	DeferCleanup(func(ctx SpecContext) {
		// Best effort: an image a leaked watcher still holds stays behind
		// with the cluster, which the suite removes anyway.
		_, _ = ceph.Admin(ctx, "rbd", "rm", "--no-progress", ceph.Pool+"/"+image)
	})
}

// rbdExport is Ceph's own copy of image, read by Ceph's tools from the
// OSDs, not through any dataplane.
func rbdExport(ctx context.Context, image string) []byte {
	dir := GinkgoT().TempDir()
	out := filepath.Join(dir, image+".export")
	b, err := ceph.Admin(ctx, "rbd", "export", "--no-progress", ceph.Pool+"/"+image, out)
	Expect(err).NotTo(HaveOccurred(), "rbd export %s: %s", image, b)
	data, err := os.ReadFile(out)
	Expect(err).NotTo(HaveOccurred())
	Expect(os.Remove(out)).To(Succeed())
	return data
}
