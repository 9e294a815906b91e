package csi

import (
	"context"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/ceph"
)

// cachePool reads a CachePool; a missing one is ErrNotFound.
func (d *Driver) cachePool(ctx context.Context, name string) (*rcv1.CachePool, error) {
	var pool rcv1.CachePool
	if err := d.ctrl.Client.Get(ctx, client.ObjectKey{Name: name}, &pool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errorf(ErrNotFound, "CachePool %s does not exist", name)
		}
		return nil, errorf(ErrUnavailable, "read CachePool %s: %v", name, err)
	}
	return &pool, nil
}

// openImages connects to the Ceph cluster of a CachePool, as the user of
// the request's secrets (ceph-csi's userID/userKey) or, without them, the
// pool's own provisioner user (its Rook or explicit backend).
func (d *Driver) openImages(ctx context.Context, poolName string, secrets map[string]string) (Images, error) {
	pool, err := d.cachePool(ctx, poolName)
	if err != nil {
		return nil, err
	}
	var creds CephCredentials
	if user, key := secrets[ceph.UserIDKey], secrets[ceph.UserKeyKey]; user != "" || key != "" {
		if user == "" || key == "" {
			return nil, errorf(ErrInvalidArgument, "the secrets must hold both %s and %s", ceph.UserIDKey, ceph.UserKeyKey)
		}
		mons, err := ceph.Monitors(ctx, d.ctrl.Client, pool)
		if err != nil {
			return nil, errorf(ErrUnavailable, "CachePool %s: %v", poolName, err)
		}
		creds = CephCredentials{Monitors: mons, User: strings.TrimPrefix(user, "client."), Key: key}
	} else {
		b, err := ceph.Resolve(ctx, d.ctrl.Client, pool, ceph.Provisioner)
		if err != nil {
			return nil, errorf(ErrUnavailable, "CachePool %s: %v", poolName, err)
		}
		creds = CephCredentials{Monitors: b.Monitors, User: b.UserID, Key: string(b.Key)}
	}
	images, err := d.ctrl.Ceph.Connect(ctx, creds)
	if err != nil {
		return nil, errorf(ErrUnavailable, "connect to Ceph of CachePool %s as %s: %v", poolName, creds.User, err)
	}
	return images, nil
}
