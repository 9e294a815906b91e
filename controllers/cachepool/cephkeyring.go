package cachepool

import (
	"context"
	"fmt"

	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/ceph"
	"github.com/rackcache/rackcache/controllers/servers"
)

// reconcileCephKeyring copies the cephx key of pool's data-path user
// (backend) into the Secret its dataplane pods mount (--ceph-keyring). The
// servers then register the cluster without a key, and no configuration
// they save holds one. A backend that cannot be resolved yet (nil) leaves
// the Secret as it is: the status reports the Ceph error, and the servers
// keep the last key.
func (r *Reconciler) reconcileCephKeyring(ctx context.Context, pool *rcv1.CachePool, backend *ceph.Backend) error {
	if backend == nil {
		return nil
	}
	name := servers.CephKeyringSecretName(pool.Name)
	s := corev1ac.Secret(name, r.Namespace).
		WithLabels(servers.Labels(pool.Name)).
		WithOwnerReferences(ownerReference(pool)).
		WithData(map[string][]byte{servers.CephKeyringKey: cephKeyring(backend)})
	if err := r.Client.Apply(ctx, s, client.FieldOwner(servers.ManagerName), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply secret %s/%s: %w", r.Namespace, name, err)
	}
	return nil
}

// cephKeyring is backend's user and key in Ceph's keyring format.
func cephKeyring(backend *ceph.Backend) []byte {
	return fmt.Appendf(nil, "[client.%s]\n\tkey = %s\n", backend.UserID, string(backend.Key))
}
