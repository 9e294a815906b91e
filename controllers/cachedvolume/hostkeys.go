package cachedvolume

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/controllers/hostkeys"
)

// rotatedForAnnotation on a host-keys Secret is the last value of the
// volume's rotate-host-keys annotation that was acted on.
const rotatedForAnnotation = "rackcache.io/rotated-for"

// LabelHostKeysOf labels a host-keys Secret with its CachedVolume.
const LabelHostKeysOf = "rackcache.io/host-keys-of"

// HostKeysSecretName is the Secret (in the operator's namespace) holding
// vol's host keys.
func HostKeysSecretName(vol *rcv1.CachedVolume) string {
	if vol.Spec.HostKeysSecret != "" {
		return vol.Spec.HostKeysSecret
	}
	return vol.Name + "-host-keys"
}

// ensureHostKeys makes vol's Secret hold one current key pair per allowed
// host (new hosts get one, leaving hosts lose theirs, pairs older than the
// pool's rotation interval or a new rotate-host-keys value get the next
// generation) and returns the pairs by host NQN; nil when the pool does not
// authenticate hosts, whose Secret is kept empty (it exists either way, so
// the kubelet finds the Secret the StorageClass names). The Secret is read
// past the cache: a stale copy would hand the dataplane an older
// generation than the node has.
func (r *Reconciler) ensureHostKeys(ctx context.Context, vol *rcv1.CachedVolume, pool *rcv1.CachePool) (map[string]hostkeys.Pair, error) {
	key := client.ObjectKey{Namespace: r.Namespace, Name: HostKeysSecretName(vol)}
	sec := &corev1.Secret{}
	err := r.apiReader().Get(ctx, key, sec)
	create := apierrors.IsNotFound(err)
	if err != nil && !create {
		return nil, fmt.Errorf("read the host keys Secret %s: %w", key, err)
	}
	if create {
		sec = newHostKeysSecret(vol, key)
	}
	if sec.Labels[LabelHostKeysOf] != vol.Name {
		return nil, fmt.Errorf("secret %s exists and is not this volume's host keys (no label %s=%s): rename or remove it", key, LabelHostKeysOf, vol.Name)
	}
	var pairs map[string]hostkeys.Pair
	rotated := false
	if pool.Spec.DataPath.AuthenticatesHosts() {
		pairs, rotated, err = nextPairs(vol, pool, hostkeys.Pairs(sec.Data), sec.Annotations[rotatedForAnnotation], r.now())
		if err != nil {
			return nil, err
		}
	}
	data := map[string][]byte{}
	for _, p := range pairs {
		hostkeys.Put(data, p)
	}
	if !create && !rotated && maps.EqualFunc(data, sec.Data, func(a, b []byte) bool { return string(a) == string(b) }) {
		return pairs, nil
	}
	sec.Data = data
	if rotated {
		metav1.SetMetaDataAnnotation(&sec.ObjectMeta, rotatedForAnnotation, vol.Annotations[rcv1.RotateHostKeysAnnotation])
	}
	if create {
		err = r.Client.Create(ctx, sec)
	} else {
		err = r.Client.Update(ctx, sec)
	}
	if err != nil {
		return nil, fmt.Errorf("write the host keys Secret %s: %w", key, err)
	}
	return pairs, nil
}

func newHostKeysSecret(vol *rcv1.CachedVolume, key client.ObjectKey) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: key.Name, Namespace: key.Namespace,
			Labels: map[string]string{LabelHostKeysOf: vol.Name, "app.kubernetes.io/managed-by": "rackcache-operator"},
			// Goes with its volume (a namespaced object may have a
			// cluster-scoped owner).
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: rcv1.GroupVersion.String(), Kind: "CachedVolume",
				Name: vol.Name, UID: vol.UID, Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true),
			}},
		},
		Type: corev1.SecretTypeOpaque,
	}
}

func ptrTo[T any](v T) *T { return &v }

// nextPairs is the pure step of ensureHostKeys: the pairs the allowed
// hosts should have at now, and whether the volume's rotation request
// (rotatedFor: the last one acted on) was acted on now.
func nextPairs(vol *rcv1.CachedVolume, pool *rcv1.CachePool, have map[string]hostkeys.Pair, rotatedFor string, now time.Time) (map[string]hostkeys.Pair, bool, error) {
	request := vol.Annotations[rcv1.RotateHostKeysAnnotation]
	rotate := request != "" && request != rotatedFor
	var every time.Duration
	if d := pool.Spec.DataPath.KeyRotationInterval; d != nil {
		every = d.Duration
	}
	out := map[string]hostkeys.Pair{}
	tls := pool.Spec.DataPath.TLS
	for _, h := range vol.Spec.AllowedHosts {
		p, ok := have[h]
		due := ok && every > 0 && now.Sub(p.Created) >= every
		// A pair without the PSK the pool's TLS needs (or with one it
		// does not) is replaced.
		fits := (p.PSK != "") == tls
		if ok && !due && !rotate && fits {
			out[h] = p
			continue
		}
		next, err := hostkeys.NewPair(h, p.Generation+1, now, tls)
		if err != nil {
			return nil, false, err
		}
		out[h] = next
	}
	return out, rotate, nil
}

// keyName names one of a pair's keys in the dataplane's keyring: the
// volume, the host's entry, the generation and a digest of the secret
// (a Secret deleted and made anew starts at generation 1 again with
// other keys, which must not pass for the old ones).
func keyName(vol string, p hostkeys.Pair, role, secret string) string {
	sum := sha256.Sum256([]byte("rackcache key name\x00" + secret))
	return strings.Join([]string{keyPrefix(vol) + hostkeys.EntryID(p.HostNQN), strconv.FormatInt(p.Generation, 10), role, hex.EncodeToString(sum[:4])}, ".")
}

// keyPrefix starts the keyring names of every key of vol.
func keyPrefix(vol string) string { return "dhchap." + vol + "." }

// hostKeyNames are the names of vol's host keys in the dataplane's
// keyring. The prefix alone would take volume a.b's keys for a's: after
// it, a key of vol's own has exactly keyName's four fields (the entry id
// is hex, without dots).
func hostKeyNames(ctx context.Context, c *dataplane.Client, vol string) (map[string]bool, error) {
	names, err := keyringNames(ctx, c, keyPrefix(vol))
	for name := range names {
		if strings.Count(strings.TrimPrefix(name, keyPrefix(vol)), ".") != 3 {
			delete(names, name)
		}
	}
	return names, err
}

// HostKeys are the keys one host authenticates with, for the dataplane.
type HostKeys struct {
	Names      dataplane.HostKeyNames
	Host, Ctrl dataplane.Secret
	// PSK is the TLS PSK ("" without TLS).
	PSK dataplane.Secret
}

// desiredHostKeys turns the Secret's pairs into keyring keys.
func desiredHostKeys(vol string, pairs map[string]hostkeys.Pair) map[string]HostKeys {
	if pairs == nil {
		return nil
	}
	out := make(map[string]HostKeys, len(pairs))
	for h, p := range pairs {
		k := HostKeys{
			Names: dataplane.HostKeyNames{Host: keyName(vol, p, "host", p.Host), Ctrlr: keyName(vol, p, "ctrl", p.Ctrl)},
			Host:  dataplane.Secret(p.Host), Ctrl: dataplane.Secret(p.Ctrl),
		}
		if p.PSK != "" {
			k.Names.PSK, k.PSK = keyName(vol, p, "psk", p.PSK), dataplane.Secret(p.PSK)
		}
		out[h] = k
	}
	return out
}

// ensureKeys gives the dataplane the keys of want it lacks.
func ensureKeys(ctx context.Context, c *dataplane.Client, have map[string]bool, want HostKeys) error {
	for _, k := range []struct {
		name   string
		secret dataplane.Secret
	}{{want.Names.Host, want.Host}, {want.Names.Ctrlr, want.Ctrl}, {want.Names.PSK, want.PSK}} {
		if k.name == "" || have[k.name] {
			continue
		}
		if err := c.AddMemoryKey(ctx, k.name, k.secret); err != nil && !dataplane.IsExists(err) {
			return fmt.Errorf("give the dataplane key %s: %w", k.name, err)
		}
		have[k.name] = true
	}
	return nil
}

// keyringNames lists the dataplane's keys whose names start with prefix.
func keyringNames(ctx context.Context, c *dataplane.Client, prefix string) (map[string]bool, error) {
	keys, err := c.Keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the dataplane's keyring: %w", err)
	}
	out := map[string]bool{}
	for _, k := range keys {
		if strings.HasPrefix(k.Name, prefix) {
			out[k.Name] = true
		}
	}
	return out, nil
}

// dropKeys removes the keys in have (vol's keys the dataplane holds) that
// no host uses any more (replaced or revoked ones): keep names the keys
// still wanted.
func dropKeys(ctx context.Context, c *dataplane.Client, have, keep map[string]bool) error {
	for _, name := range slices.Sorted(maps.Keys(have)) {
		if keep[name] {
			continue
		}
		if err := c.RemoveMemoryKey(ctx, name); err != nil && !dataplane.IsNotFound(err) {
			return fmt.Errorf("remove the replaced key %s from the dataplane: %w", name, err)
		}
	}
	return nil
}
