package cachepool

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// testPool is a minimal valid pool with explicit monitors and two devices.
func testPool(name string) *rcv1.CachePool {
	size := resource.MustParse("100Gi")
	return &rcv1.CachePool{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Generation: 3},
		Spec: rcv1.CachePoolSpec{
			NodeSelector: map[string]string{"rackcache.io/cache-server": "true"},
			Devices: []rcv1.CacheDevice{
				{Path: "/dev/nvme1n1"},
				{Path: "/dev/disk/by-id/nvme-b", Size: &size},
			},
			Port:  4420,
			Image: "ghcr.io/rackcache/dataplane:v0.1.0",
			Ceph: rcv1.CephBackend{
				Monitors:  []string{"10.0.0.1:6789"},
				SecretRef: &rcv1.SecretReference{Name: "ceph-user", Namespace: "ceph"},
			},
		},
	}
}
