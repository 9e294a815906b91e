package e2e

import (
	"context"

	. "github.com/onsi/ginkgo/v2" //nolint:revive,staticcheck // ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive,staticcheck // gomega's DSL reads best unqualified
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rackcache/rackcache/test/e2e/specs"
)

const (
	poolName     = "e2e"
	workloads    = "rackcache-e2e"
	writeThrough = "rackcache-e2e-wt"
	writeBack    = "rackcache-e2e-wb"
	fileMiB      = 16
	volumeSize   = "64Mi"
	expandedSize = "128Mi"
)

// One ordered story, as a user lives it: install, a pool, volumes used by
// pods, the loss of a cache server, expansion, snapshots and clones, a
// dataplane crash, and an
// uninstall that leaves nothing behind. Specs labelled smoke run in `make
// test`; none of them needs a spec that is not.
var _ = Describe("rackcache on a cluster", Ordered, func() {
	var (
		volumes []*specs.Volume
		fsWT    *specs.Volume // write-through, ext4
		fsSum   string        // md5 of what fsWT holds
	)
	track := func(v *specs.Volume) *specs.Volume { volumes = append(volumes, v); return v }

	BeforeAll(func(ctx context.Context) {
		// Clean-up runs last to first, every step even when one before it
		// failed (or the install did): workloads, the pool, the release.
		DeferCleanup(specs.UninstallChart, env)
		DeferCleanup(specs.DeleteCachePool, env, poolName)
		DeferCleanup(specs.DeleteWorkloads, env, workloads)
		specs.InstallChart(ctx, env, specs.InstallInput{
			CachePool: poolName,
			StorageClasses: []specs.StorageClass{
				{Name: writeThrough, WriteMode: "WriteThrough", CacheSize: "50%"},
				{Name: writeBack, WriteMode: "WriteBack", CacheSize: "50%"},
			},
			VolumeSnapshotClass: true,
		})
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workloads}}
		Expect(client.IgnoreAlreadyExists(env.Cluster.Client.Create(ctx, ns))).To(Succeed())
	})

	It("makes a CachePool on the cache-server nodes Ready", Label("smoke"), func(ctx context.Context) {
		specs.CreateCachePool(ctx, env, specs.PoolInput{Name: poolName, TLS: true})
	})

	It("serves a write-through file system volume to a pod on a compute node", Label("smoke"), func(ctx context.Context) {
		fsWT = track(specs.CreateVolumeWithPod(ctx, env, specs.VolumeInput{
			Namespace: workloads, Name: "fs-wt", StorageClass: writeThrough, Size: volumeSize,
		}))
		fsSum = specs.WriteAndVerify(ctx, env, fsWT, fileMiB)
		specs.ExpectSubsystem(ctx, env, poolName, fsWT)
		specs.ExpectHostAuthenticated(ctx, env, poolName, fsWT)
		specs.ExpectTLS(ctx, env, fsWT)
		specs.RotateHostKeys(ctx, env, poolName, fsWT)
		specs.ExpectHitRatio(ctx, env, fsWT)
		specs.ExpectHitRatioInPrometheus(ctx, env, fsWT)
		specs.ExpectReadBack(ctx, env, fsWT, fileMiB, fsSum)
	})

	It("keeps the pod's writes going through the loss of its volume's cache server, which returns as the mirror", Label("smoke"), func(ctx context.Context) {
		fsSum = specs.LoseOwnerNode(ctx, env, poolName, fsWT, fileMiB)
	})

	It("serves a raw block volume whose writes reach Ceph", func(ctx context.Context) {
		v := track(specs.CreateVolumeWithPod(ctx, env, specs.VolumeInput{
			Namespace: workloads, Name: "block-wt", StorageClass: writeThrough, Size: volumeSize, Block: true,
		}))
		sum := specs.WriteAndVerify(ctx, env, v, fileMiB)
		specs.ExpectCephHolds(ctx, env, v, fileMiB, sum)
	})

	It("grows a mounted volume online, and the pod sees the new size", func(ctx context.Context) {
		specs.ExpandVolume(ctx, env, fsWT, expandedSize)
		specs.ExpectReadBack(ctx, env, fsWT, fileMiB, fsSum)
	})

	It("restores a snapshot and clones a volume with the same data", func(ctx context.Context) {
		specs.TakeSnapshot(ctx, env, fsWT, "fs-wt-snap")
		restored := track(specs.RestoreSnapshot(ctx, env, fsWT, "fs-wt-snap", "fs-restored"))
		specs.ExpectReadBack(ctx, env, restored, fileMiB, fsSum)
		clone := track(specs.ClonePVC(ctx, env, fsWT, "fs-clone"))
		specs.ExpectReadBack(ctx, env, clone, fileMiB, fsSum)
		specs.DeleteSnapshot(ctx, env, workloads, "fs-wt-snap")
	})

	It("keeps serving after the dataplane crashes (SIGKILL), and loses no acknowledged write-back write", func(ctx context.Context) {
		wb := track(specs.CreateVolumeWithPod(ctx, env, specs.VolumeInput{
			Namespace: workloads, Name: "block-wb", StorageClass: writeBack, Size: volumeSize, Block: true,
		}))
		wbSum := specs.WriteAndVerify(ctx, env, wb, fileMiB)
		specs.ExpectDirty(ctx, env, poolName, wb)
		specs.CrashDataplanes(ctx, env, poolName)
		specs.ExpectReadBack(ctx, env, wb, fileMiB, wbSum)
		specs.ExpectReadBack(ctx, env, fsWT, fileMiB, fsSum)
		fsSum = specs.WriteAndVerify(ctx, env, fsWT, fileMiB)
		specs.WaitClean(ctx, env, poolName, wb)
		specs.ExpectCephHolds(ctx, env, wb, fileMiB, wbSum)
	})

	It("shows data in every dashboard panel and fires no alert on a healthy cluster", func(ctx context.Context) {
		specs.ExpectDashboardsHaveData(ctx, env)
		specs.ExpectAlertsHealthy(ctx, env)
	})

	It("deletes volumes without leaving an RBD image, a CachedVolume or a subsystem", Label("smoke"), func(ctx context.Context) {
		for _, v := range volumes {
			specs.DeleteVolume(ctx, env, v)
		}
		specs.ExpectNoSubsystems(ctx, env, poolName, volumes)
		volumes = nil
	})
})
