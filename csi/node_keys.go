package csi

import (
	"context"

	"github.com/go-logr/logr"

	"github.com/rackcache/rackcache/controllers/hostkeys"
)

// keysHint says where a node's keys come from, for errors about them.
const keysHint = "a pool that authenticates hosts needs the StorageClass to pass the volume's host keys " +
	"(csi.storage.k8s.io/node-stage-secret-name and node-publish-secret-name: rackcache-keys-${pv.name}, " +
	"their namespaces the operator's; docs/security.md)"

// hostKeys reads this node's DH-HMAC-CHAP keys (and TLS PSK) from the secrets the
// kubelet passes (the volume's host-keys Secret, named by the
// StorageClass); nil when the call carries none.
func (d *Driver) hostKeys(secrets map[string]string) (*HostKeys, error) {
	if len(secrets) == 0 {
		return nil, nil
	}
	p, found, err := hostkeys.ForHost(secrets, d.node.HostNQN)
	if !found {
		return nil, errorf(ErrFailedPrecondition, "the volume's host keys hold none for this node's host NQN %s: the volume is not published to this node", d.node.HostNQN)
	}
	if err != nil {
		return nil, errorf(ErrInvalidArgument, "the volume's host keys: %v", err)
	}
	return &HostKeys{Host: p.Host, Ctrl: p.Ctrl, PSK: p.PSK}, nil
}

// rotateKeys gives the volume's live controllers the keys of this call
// (NodePublishVolume runs again and again with requiresRepublish, each
// time with the Secret's current keys), so a rotation reaches a mounted
// volume without unmounting it.
func (d *Driver) rotateKeys(ctx context.Context, subNQN string, secrets map[string]string) error {
	keys, err := d.hostKeys(secrets)
	if err != nil || keys == nil {
		return err
	}
	n, err := d.node.NVMe.SetKeys(subNQN, *keys)
	if err != nil {
		return errorf(ErrUnavailable, "%v", err)
	}
	// A new PSK serves the next TLS handshake (a reconnect); open
	// channels keep theirs.
	if keys.PSK != "" {
		if err := d.node.NVMe.InsertPSK(ctx, d.node.HostNQN, subNQN, keys.PSK); err != nil {
			return errorf(ErrUnavailable, "%v", err)
		}
	}
	if n > 0 {
		logr.FromContextOrDiscard(ctx).Info("host keys rotated: the controllers re-authenticate", "subnqn", subNQN, "controllers", n)
	}
	return nil
}
