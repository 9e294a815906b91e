// Package ceph resolves a CachePool's Ceph backend into monitors and a
// cephx user: from a Rook CephCluster's namespace (the ConfigMap and
// Secrets Rook keeps for its CSI driver) or from explicit monitors and a
// Secret. Keys are returned as dataplane.Secret so no formatting of a
// Backend ever shows them.
package ceph

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dataplane"
)

// Names Rook uses for what its CSI driver reads.
const (
	// RookMonEndpoints is the ConfigMap with the monitors, key RookMonKey.
	RookMonEndpoints = "rook-ceph-mon-endpoints"
	// RookMonKey holds "a=IP:PORT,b=IP:PORT".
	RookMonKey = "data"
	// RookProvisionerSecret holds the user that creates and deletes images.
	RookProvisionerSecret = "rook-csi-rbd-provisioner"
	// RookNodeSecret holds the user that reads and writes images.
	RookNodeSecret = "rook-csi-rbd-node"
	// UserIDKey and UserKeyKey are the keys of a credentials Secret.
	UserIDKey  = "userID"
	UserKeyKey = "userKey"
)

// Role says which Rook user is wanted.
type Role int

const (
	// Node is the data path's user (the dataplane's rbd bdevs).
	Node Role = iota
	// Provisioner is the user that creates, resizes and deletes images.
	Provisioner
)

// Backend is a resolved Ceph backend.
type Backend struct {
	// Monitors are host:port addresses, sorted.
	Monitors []string
	// UserID is the cephx user without "client.".
	UserID string
	// Key is the user's cephx key.
	Key dataplane.Secret
}

// MonHost is Monitors as Ceph's mon_host option takes them.
func (b *Backend) MonHost() string { return strings.Join(b.Monitors, ",") }

// Fingerprint changes whenever the monitors, the user or the key change; it
// names the dataplane's cluster registration, so a change registers anew.
// It is a hash: the key cannot be recovered from it.
func (b *Backend) Fingerprint() string {
	h := sha256.New()
	h.Write([]byte(b.MonHost()))
	h.Write([]byte{0})
	h.Write([]byte(b.UserID))
	h.Write([]byte{0})
	h.Write([]byte(b.Key))
	return hex.EncodeToString(h.Sum(nil))[:10]
}

// Resolve reads pool's backend for role. Errors name the object and key
// that are missing or malformed, never a key's value.
func Resolve(ctx context.Context, r client.Reader, pool *rcv1.CachePool, role Role) (*Backend, error) {
	mons, err := Monitors(ctx, r, pool)
	if err != nil {
		return nil, err
	}
	spec := pool.Spec.Ceph
	if spec.Rook != nil {
		name := RookNodeSecret
		if role == Provisioner {
			name = RookProvisionerSecret
		}
		return withUser(ctx, r, mons, spec.Rook.Namespace, name)
	}
	return withUser(ctx, r, mons, spec.SecretRef.Namespace, spec.SecretRef.Name)
}

// Monitors reads pool's monitor addresses (sorted) without its
// credentials: for callers that bring their own user (the CSI driver with
// a StorageClass's secrets).
func Monitors(ctx context.Context, r client.Reader, pool *rcv1.CachePool) ([]string, error) {
	spec := pool.Spec.Ceph
	switch {
	case spec.Rook != nil:
		ns := spec.Rook.Namespace
		var cm corev1.ConfigMap
		if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: RookMonEndpoints}, &cm); err != nil {
			return nil, fmt.Errorf("read Rook monitors, ConfigMap %s/%s: %w", ns, RookMonEndpoints, err)
		}
		mons, err := ParseRookMonitors(cm.Data[RookMonKey])
		if err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s key %s: %w", ns, RookMonEndpoints, RookMonKey, err)
		}
		return mons, nil
	case len(spec.Monitors) > 0 && spec.SecretRef != nil:
		mons := slices.Clone(spec.Monitors)
		slices.Sort(mons)
		return mons, nil
	default:
		return nil, fmt.Errorf("pool %s: spec.ceph names neither rook nor monitors with secretRef", pool.Name)
	}
}

func withUser(ctx context.Context, r client.Reader, mons []string, ns, name string) (*Backend, error) {
	var s corev1.Secret
	if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		return nil, fmt.Errorf("read Ceph credentials, Secret %s/%s: %w", ns, name, err)
	}
	id := strings.TrimPrefix(strings.TrimSpace(string(s.Data[UserIDKey])), "client.")
	key := strings.TrimSpace(string(s.Data[UserKeyKey]))
	if id == "" || key == "" {
		return nil, fmt.Errorf("secret %s/%s must hold keys %s and %s", ns, name, UserIDKey, UserKeyKey)
	}
	return &Backend{Monitors: mons, UserID: id, Key: dataplane.Secret(key)}, nil
}

// ParseRookMonitors parses Rook's "a=10.0.0.1:6789,b=10.0.0.2:6789" into
// sorted host:port addresses.
func ParseRookMonitors(data string) ([]string, error) {
	var mons []string
	for _, entry := range strings.Split(data, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, addr, ok := strings.Cut(entry, "=")
		if !ok || name == "" || addr == "" || !strings.Contains(addr, ":") {
			return nil, fmt.Errorf("monitor entry %q is not name=host:port", entry)
		}
		mons = append(mons, addr)
	}
	if len(mons) == 0 {
		return nil, fmt.Errorf("no monitors in %q", data)
	}
	slices.Sort(mons)
	return slices.Compact(mons), nil
}
