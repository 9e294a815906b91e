package specs

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2" //nolint:revive,staticcheck // ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive,staticcheck // gomega's DSL reads best unqualified
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ExpandVolume grows the volume's PVC to size (online: the pod keeps
// running) and waits until the pod sees the new size: the block device's
// size, or the file system's (grown by the node plugin). Ceph's image must
// have the new size too.
func ExpandVolume(ctx context.Context, env Env, v *Volume, size string) {
	want := resource.MustParse(size)
	By(fmt.Sprintf("expanding PVC %s/%s to %s", v.Input.Namespace, v.Input.Name, size))
	pvc := &corev1.PersistentVolumeClaim{}
	key := client.ObjectKey{Namespace: v.Input.Namespace, Name: v.Input.Name}
	Expect(env.Cluster.Client.Get(ctx, key, pvc)).To(Succeed())
	patch := client.MergeFrom(pvc.DeepCopy())
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = want
	Expect(env.Cluster.Client.Patch(ctx, pvc, patch)).To(Succeed())

	Eventually(func(g Gomega) {
		g.Expect(env.Cluster.Client.Get(ctx, key, pvc)).To(Succeed())
		got := pvc.Status.Capacity[corev1.ResourceStorage]
		g.Expect(got.Cmp(want)).To(BeNumerically(">=", 0), "PVC capacity %s, want %s", got.String(), size)
	}).WithContext(ctx).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed(), func() string {
		ev, _ := env.Cluster.Kubectl(ctx, "get", "events", "-n", v.Input.Namespace, "--sort-by=.lastTimestamp")
		return "the PVC did not grow; events:\n" + ev
	})
	Eventually(func(g Gomega) {
		g.Expect(podSeenSize(ctx, env, v)).To(BeNumerically(">=", want.Value()*9/10),
			"the pod does not see the new size yet")
	}).WithContext(ctx).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
	got, err := env.Ceph.ImageSize(ctx, v.CachedVolume)
	Expect(err).NotTo(HaveOccurred())
	Expect(got).To(Equal(want.Value()), "Ceph's image %s", v.CachedVolume)
	// Restores and clones of it must ask for at least this much.
	v.Input.Size = size
}

// podSeenSize is the volume's size as its pod sees it: the block device's
// size, or the mounted file system's total bytes (a little less than the
// device: the file system's own metadata).
func podSeenSize(ctx context.Context, env Env, v *Volume) int64 {
	script := "df -k " + mountPath + " | awk 'NR == 2 { print $2 * 1024 }'"
	if v.Input.Block {
		script = "blockdev --getsize64 " + devicePath
	}
	out := v.Sh(ctx, env, script)
	n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	Expect(err).NotTo(HaveOccurred(), "size from %q", out)
	return n
}
