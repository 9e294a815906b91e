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
	poolName      = "e2e"
	workloads     = "rackcache-e2e"
	writeThrough  = "rackcache-e2e-wt"
	writeBack     = "rackcache-e2e-wb"
	fileMiB       = 16
	volumeSize    = "64Mi"
	expandedSize  = "128Mi"
	expandedBytes = 128 << 20
)

// One ordered story, as a user lives it: install, a pool, volumes used by
// pods, and an uninstall that leaves nothing behind. Specs labelled smoke
// run in `make test`.
var _ = Describe("rackcache on a cluster", Ordered, func() {
	var volumes []*specs.Volume

	BeforeAll(func(ctx context.Context) {
		specs.InstallChart(ctx, env, specs.InstallInput{
			CachePool: poolName,
			StorageClasses: []specs.StorageClass{
				{Name: writeThrough, WriteMode: "WriteThrough", CacheSize: "50%"},
				{Name: writeBack, WriteMode: "WriteBack", CacheSize: "50%"},
			},
		})
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workloads}}
		Expect(client.IgnoreAlreadyExists(env.Cluster.Client.Create(ctx, ns))).To(Succeed())
	})

	It("makes a CachePool on the cache-server nodes Ready", Label("smoke"), func(ctx context.Context) {
		specs.CreateCachePool(ctx, env, specs.PoolInput{Name: poolName})
	})

	It("serves a write-through file system volume to a pod on a compute node", Label("smoke"), func(ctx context.Context) {
		v := specs.CreateVolumeWithPod(ctx, env, specs.VolumeInput{
			Namespace: workloads, Name: "fs-wt", StorageClass: writeThrough, Size: volumeSize,
		})
		volumes = append(volumes, v)
		sum := specs.WriteAndVerify(ctx, env, v, fileMiB)
		specs.ExpectSubsystem(ctx, env, poolName, v)
		specs.ExpectHitRatio(ctx, env, v)
		specs.ExpectReadBack(ctx, env, v, fileMiB, sum)
	})

	It("serves a raw block volume whose writes reach Ceph", func(ctx context.Context) {
		v := specs.CreateVolumeWithPod(ctx, env, specs.VolumeInput{
			Namespace: workloads, Name: "block-wt", StorageClass: writeThrough, Size: volumeSize, Block: true,
		})
		volumes = append(volumes, v)
		sum := specs.WriteAndVerify(ctx, env, v, fileMiB)
		specs.ExpectCephHolds(ctx, env, v, fileMiB, sum)
	})

	It("deletes volumes without leaving an RBD image, a CachedVolume or a subsystem", Label("smoke"), func(ctx context.Context) {
		for _, v := range volumes {
			specs.DeleteVolume(ctx, env, v)
		}
		specs.ExpectNoSubsystems(ctx, env, poolName, volumes)
		volumes = nil
	})

	AfterAll(func(ctx context.Context) {
		specs.DeleteWorkloads(ctx, env, workloads)
		specs.DeleteCachePool(ctx, env, poolName)
		specs.UninstallChart(ctx, env)
	})
})
