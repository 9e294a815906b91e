package specs

import (
	"context"
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2" //nolint:revive,staticcheck // ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive,staticcheck // gomega's DSL reads best unqualified
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// SnapshotClass is the chart's VolumeSnapshotClass (values
// volumeSnapshotClass.name).
const SnapshotClass = "rackcache"

// TakeSnapshot takes a VolumeSnapshot of the volume's PVC and waits until it
// is ready to use.
func TakeSnapshot(ctx context.Context, env Env, v *Volume, name string) {
	By(fmt.Sprintf("taking VolumeSnapshot %s/%s of %s", v.Input.Namespace, name, v.Input.Name))
	Expect(env.Cluster.KubectlApply(ctx, fmt.Sprintf(`apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata: {name: %s, namespace: %s}
spec:
  volumeSnapshotClassName: %s
  source: {persistentVolumeClaimName: %s}
`, name, v.Input.Namespace, SnapshotClass, v.Input.Name))).To(Succeed())
	Eventually(func(g Gomega) {
		out, err := env.Cluster.Kubectl(ctx, "get", "volumesnapshot", "-n", v.Input.Namespace, name,
			"-o", "jsonpath={.status.readyToUse} {.status.error.message}")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(strings.TrimSpace(out)).To(HavePrefix("true"), "snapshot not ready: %s", out)
	}).WithContext(ctx).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
}

// RestoreSnapshot creates a volume (and its pod) from a VolumeSnapshot.
func RestoreSnapshot(ctx context.Context, env Env, from *Volume, snapshot, name string) *Volume {
	in := from.Input
	in.Name = name
	in.DataSource = &corev1.TypedLocalObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: snapshot}
	return CreateVolumeWithPod(ctx, env, in)
}

// ClonePVC creates a volume (and its pod) cloned from another's PVC.
func ClonePVC(ctx context.Context, env Env, from *Volume, name string) *Volume {
	in := from.Input
	in.Name = name
	in.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: from.Input.Name}
	return CreateVolumeWithPod(ctx, env, in)
}

// DeleteSnapshot deletes a VolumeSnapshot and waits until it is gone.
func DeleteSnapshot(ctx context.Context, env Env, namespace, name string) {
	_, err := env.Cluster.Kubectl(ctx, "delete", "volumesnapshot", "-n", namespace, name, "--ignore-not-found", "--wait", "--timeout", goneTimeout.String())
	Expect(err).NotTo(HaveOccurred())
}
