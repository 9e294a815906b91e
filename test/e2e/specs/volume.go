package specs

import (
	"context"
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2" //nolint:revive,staticcheck // ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive,staticcheck // gomega's DSL reads best unqualified
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// The CSI driver's annotations naming a CachedVolume's PVC (csi/cachedvolume.go).
const (
	pvcAnnotation          = "csi.rackcache.io/pvc"
	pvcNamespaceAnnotation = "csi.rackcache.io/pvc-namespace"
	// nqnPrefix starts every volume's subsystem NQN (controllers/cachedvolume).
	nqnPrefix = "nqn.2025-01.io.rackcache:vol:"
)

// Where a pod sees its volume.
const (
	mountPath  = "/data"
	devicePath = "/dev/xvda"
)

// VolumeInput describes a PVC and the pod using it.
type VolumeInput struct {
	Namespace    string
	Name         string // of the PVC and the pod
	StorageClass string
	Size         string // e.g. 64Mi
	Block        bool   // volumeMode Block instead of a mounted file system
	// DataSource clones a PVC or restores a VolumeSnapshot (kind, name).
	DataSource *corev1.TypedLocalObjectReference
}

// Volume is a bound PVC, the running pod using it and the CachedVolume
// behind it.
type Volume struct {
	Input        VolumeInput
	CachedVolume string // also the RBD image's name
}

// CreateVolumeWithPod creates the PVC and a pod on a compute node that uses
// it (WaitForFirstConsumer binds it there), and waits until the pod runs.
func CreateVolumeWithPod(ctx context.Context, env Env, in VolumeInput) *Volume {
	c := env.Cluster
	By(fmt.Sprintf("creating PVC %s/%s (%s, %s, block=%v) and its pod", in.Namespace, in.Name, in.StorageClass, in.Size, in.Block))
	mode := corev1.PersistentVolumeFilesystem
	if in.Block {
		mode = corev1.PersistentVolumeBlock
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: in.Namespace, Name: in.Name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(in.StorageClass),
			VolumeMode:       &mode,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(in.Size)}},
			DataSource:       in.DataSource,
		},
	}
	Expect(c.Client.Create(ctx, pvc)).To(Succeed())
	Expect(c.Client.Create(ctx, workloadPod(c.Config.WorkloadImage, c.Config.ComputeNodeSelector, in))).To(Succeed())
	WaitPodRunning(ctx, env, in.Namespace, in.Name)
	v := &Volume{Input: in}
	v.CachedVolume = cachedVolumeOf(ctx, env, in.Namespace, in.Name).Name
	return v
}

// workloadPod runs the workload image's sh on a compute node, with the
// volume at mountPath (or devicePath), privileged so that it can drop the
// page cache between writing and reading.
func workloadPod(image string, nodes map[string]string, in VolumeInput) *corev1.Pod {
	ctr := corev1.Container{
		Name: "workload", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"},
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
	}
	if in.Block {
		ctr.VolumeDevices = []corev1.VolumeDevice{{Name: "vol", DevicePath: devicePath}}
	} else {
		ctr.VolumeMounts = []corev1.VolumeMount{{Name: "vol", MountPath: mountPath}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: in.Namespace, Name: in.Name, Labels: map[string]string{"app.kubernetes.io/part-of": "rackcache-e2e"}},
		Spec: corev1.PodSpec{
			NodeSelector:                  nodes,
			DNSPolicy:                     corev1.DNSDefault, // it resolves no names
			Containers:                    []corev1.Container{ctr},
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Volumes: []corev1.Volume{{Name: "vol", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: in.Name},
			}}},
		},
	}
}

// WaitPodRunning waits until the pod runs, reporting why it does not.
func WaitPodRunning(ctx context.Context, env Env, namespace, name string) {
	Eventually(func(g Gomega) {
		phase, why, err := env.Cluster.PodPhase(ctx, namespace, name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(phase).To(Equal(corev1.PodRunning), why)
	}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed(), func() string {
		ev, _ := env.Cluster.Kubectl(ctx, "get", "events", "-n", namespace, "--sort-by=.lastTimestamp")
		reportPods(ctx, env, env.Cluster.Config.Namespace)
		return "pod " + namespace + "/" + name + " is not running; events:\n" + ev
	})
}

// cachedVolumeOf finds the CachedVolume the CSI driver made for a PVC.
func cachedVolumeOf(ctx context.Context, env Env, namespace, pvc string) *rcv1.CachedVolume {
	var found *rcv1.CachedVolume
	Eventually(func(g Gomega) {
		found = nil
		var list rcv1.CachedVolumeList
		g.Expect(env.Cluster.Client.List(ctx, &list)).To(Succeed())
		for i := range list.Items {
			cv := &list.Items[i]
			if cv.Annotations[pvcAnnotation] == pvc && cv.Annotations[pvcNamespaceAnnotation] == namespace {
				found = cv
			}
		}
		g.Expect(found).NotTo(BeNil(), "no CachedVolume annotated with PVC %s/%s", namespace, pvc)
	}).WithContext(ctx).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed())
	return found
}

// GetCachedVolume reads the volume's CachedVolume.
func (v *Volume) GetCachedVolume(ctx context.Context, env Env) *rcv1.CachedVolume {
	cv := &rcv1.CachedVolume{}
	Expect(env.Cluster.Client.Get(ctx, client.ObjectKey{Name: v.CachedVolume}, cv)).To(Succeed())
	return cv
}

// Sh runs a script in the volume's pod.
func (v *Volume) Sh(ctx context.Context, env Env, script string) string {
	out, err := env.Cluster.Exec(ctx, v.Input.Namespace, v.Input.Name, script)
	Expect(err).NotTo(HaveOccurred(), out)
	return strings.TrimSpace(out)
}

// DeleteVolume deletes the pod and the PVC and waits until the
// CachedVolume, the RBD image and the subsystem are gone.
func DeleteVolume(ctx context.Context, env Env, v *Volume) {
	c := env.Cluster
	in := v.Input
	By(fmt.Sprintf("deleting pod and PVC %s/%s", in.Namespace, in.Name))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: in.Namespace, Name: in.Name}}
	Expect(client.IgnoreNotFound(c.Client.Delete(ctx, pod))).To(Succeed())
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: in.Namespace, Name: in.Name}}
	Expect(client.IgnoreNotFound(c.Client.Delete(ctx, pvc))).To(Succeed())
	ExpectVolumeGone(ctx, env, v.CachedVolume)
}

// ExpectVolumeGone waits until a volume's CachedVolume and RBD image are
// gone.
func ExpectVolumeGone(ctx context.Context, env Env, name string) {
	Eventually(func(g Gomega) {
		err := env.Cluster.Client.Get(ctx, client.ObjectKey{Name: name}, &rcv1.CachedVolume{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "CachedVolume %s still exists (err %v)", name, err)
		exists, err := env.Ceph.ImageExists(ctx, name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(exists).To(BeFalse(), "RBD image %s still exists", name)
	}).WithContext(ctx).WithTimeout(goneTimeout).WithPolling(poll).Should(Succeed())
}

// DeleteWorkloads deletes a namespace of the specs' pods and PVCs and waits
// until no CachedVolume is left: the clean-up of a failed run, whatever
// volumes it got to create.
func DeleteWorkloads(ctx context.Context, env Env, namespace string) {
	By("deleting namespace " + namespace + " and waiting for every CachedVolume to go")
	// Snapshots first (when the cluster has them): an RBD image with
	// snapshots cannot be deleted, so the volumes would wait for them anyway.
	if _, err := env.Cluster.Kubectl(ctx, "get", "crd", "volumesnapshots.snapshot.storage.k8s.io"); err == nil {
		_, err := env.Cluster.Kubectl(ctx, "delete", "volumesnapshots", "--all", "-n", namespace, "--ignore-not-found", "--wait", "--timeout", goneTimeout.String())
		Expect(err).NotTo(HaveOccurred())
	}
	_, err := env.Cluster.Kubectl(ctx, "delete", "namespace", namespace, "--ignore-not-found", "--wait", "--timeout", goneTimeout.String())
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega) {
		var list rcv1.CachedVolumeList
		g.Expect(env.Cluster.Client.List(ctx, &list)).To(Succeed())
		g.Expect(list.Items).To(BeEmpty(), "CachedVolumes left")
	}).WithContext(ctx).WithTimeout(goneTimeout).WithPolling(poll).Should(Succeed())
}
