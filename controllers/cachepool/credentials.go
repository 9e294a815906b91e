package cachepool

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/servers"
)

// tokenBytes is the RPC token's entropy.
const tokenBytes = 32

// EventCertificateRenewed is the Event reason of a server certificate
// issued again (expiring, or no longer matching the CA or name).
const EventCertificateRenewed = "CertificateRenewed"

// reconcileCredentials makes sure pool's CA and server certificate and the
// scrape token exist and that the certificate is current. The token and
// the CA are created once and never changed while their Secrets exist
// (servers and clients hold them); the certificate is issued again when it
// is due. The RPC port needs no Secret: the operator mints a token per
// server (servers.Tokens).
func (r *Reconciler) reconcileCredentials(ctx context.Context, pool *rcv1.CachePool) error {
	if err := r.deleteLegacyToken(ctx, pool); err != nil {
		return err
	}
	if err := r.ensureMetricsToken(ctx); err != nil {
		return err
	}
	ca, err := r.ensureCA(ctx, pool)
	if err != nil {
		return err
	}
	return r.ensureServerCert(ctx, pool, ca)
}

// deleteLegacyToken deletes the shared RPC token of earlier versions: no
// server accepts it any more, and a credential nobody uses should not lie
// around.
func (r *Reconciler) deleteLegacyToken(ctx context.Context, pool *rcv1.CachePool) error {
	name := servers.LegacyTokenSecretName(pool.Name)
	s, err := r.getSecret(ctx, name)
	if err != nil || s == nil {
		return err
	}
	if err := r.Client.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete the former RPC token secret %s/%s: %w", r.Namespace, name, err)
	}
	ctrl.LoggerFrom(ctx).Info("deleted the former shared RPC token", "secret", name)
	return nil
}

// ensureMetricsToken makes the scrape token shared by the namespace's pools.
// It has no owner: it outlives any one pool (delete it by hand after
// uninstalling; a new one is made when it is missing).
func (r *Reconciler) ensureMetricsToken(ctx context.Context) error {
	return r.ensureTokenSecret(ctx, nil, servers.MetricsTokenSecretName)
}

// ensureTokenSecret creates Secret name with a random token under TokenKey
// unless it exists; an existing one is never changed (servers and clients
// hold it), only checked. owner may be nil.
func (r *Reconciler) ensureTokenSecret(ctx context.Context, owner *rcv1.CachePool, name string) error {
	s, err := r.getSecret(ctx, name)
	if err != nil {
		return err
	}
	if s != nil {
		if len(s.Data[servers.TokenKey]) < 16 {
			return fmt.Errorf("secret %s/%s has no usable key %s (at least 16 characters); delete the Secret to have a new token made", r.Namespace, name, servers.TokenKey)
		}
		return nil
	}
	raw := make([]byte, tokenBytes)
	if _, err := rand.Read(raw); err != nil {
		return fmt.Errorf("generate the token of secret %s: %w", name, err)
	}
	token := base64.RawURLEncoding.EncodeToString(raw)
	return r.createSecret(ctx, owner, name, map[string][]byte{servers.TokenKey: []byte(token)})
}

func (r *Reconciler) ensureCA(ctx context.Context, pool *rcv1.CachePool) (*keyPair, error) {
	name := servers.CASecretName(pool.Name)
	s, err := r.getSecret(ctx, name)
	if err != nil {
		return nil, err
	}
	if s != nil {
		ca, err := parseKeyPair(s.Data[servers.CACertKey], s.Data[servers.CAKeyKey])
		if err != nil {
			return nil, fmt.Errorf("secret %s/%s (keys %s, %s): %w; delete the Secret to have a new CA made", r.Namespace, name, servers.CACertKey, servers.CAKeyKey, err)
		}
		return ca, nil
	}
	ca, err := newCA(pool.Name, r.now())
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{servers.CACertKey: ca.CertPEM, servers.CAKeyKey: ca.KeyPEM}
	if err := r.createSecret(ctx, pool, name, data); err != nil {
		return nil, err
	}
	ctrl.LoggerFrom(ctx).Info("created the dataplane CA", "secret", name, "notAfter", ca.Cert.NotAfter)
	return ca, nil
}

func (r *Reconciler) ensureServerCert(ctx context.Context, pool *rcv1.CachePool, ca *keyPair) error {
	name := servers.TLSSecretName(pool.Name)
	dnsName := servers.TLSServerName(pool.Name)
	s, err := r.getSecret(ctx, name)
	if err != nil {
		return err
	}
	reason := ""
	if s != nil {
		reason = serverCertReason(s, ca, dnsName, r.now())
		if reason == "" {
			return nil
		}
	}
	cert, err := newServerCert(ca, dnsName, r.now())
	if err != nil {
		return err
	}
	data := map[string][]byte{
		servers.TLSCertKey: cert.CertPEM,
		servers.TLSKeyKey:  cert.KeyPEM,
		servers.CACertKey:  ca.CertPEM,
	}
	if s == nil {
		if err := r.createSecret(ctx, pool, name, data); err != nil {
			return err
		}
		ctrl.LoggerFrom(ctx).Info("issued the dataplane server certificate", "secret", name, "dnsName", dnsName, "notAfter", cert.Cert.NotAfter)
		return nil
	}
	// The dataplanes reload the mounted files when they change; the
	// resourceVersion makes a concurrent change fail instead of being lost.
	s.Data = data
	if err := r.Client.Update(ctx, s); err != nil {
		return fmt.Errorf("renew the server certificate in secret %s/%s: %w", r.Namespace, name, err)
	}
	ctrl.LoggerFrom(ctx).Info("renewed the dataplane server certificate", "secret", name, "reason", reason, "notAfter", cert.Cert.NotAfter)
	r.event(pool, corev1.EventTypeNormal, EventCertificateRenewed,
		fmt.Sprintf("server certificate for %s renewed (%s); new one valid until %s", dnsName, reason, cert.Cert.NotAfter.UTC().Format("2006-01-02")))
	return nil
}

// serverCertReason says why the certificate in s must be issued again, ""
// when it is good.
func serverCertReason(s *corev1.Secret, ca *keyPair, dnsName string, now time.Time) string {
	pair, err := parseKeyPair(s.Data[servers.TLSCertKey], s.Data[servers.TLSKeyKey])
	if err != nil {
		return fmt.Sprintf("keys %s/%s unusable: %v", servers.TLSCertKey, servers.TLSKeyKey, err)
	}
	if !bytes.Equal(s.Data[servers.CACertKey], ca.CertPEM) {
		return fmt.Sprintf("key %s is not the pool's CA", servers.CACertKey)
	}
	return renewalReason(pair.Cert, ca.Cert, dnsName, now)
}

// getSecret reads a Secret of the operator's namespace; nil when absent.
func (r *Reconciler) getSecret(ctx context.Context, name string) (*corev1.Secret, error) {
	var s corev1.Secret
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: name}, &s)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read secret %s/%s: %w", r.Namespace, name, err)
	}
	return &s, nil
}

// createSecret creates a Secret owned by pool (nil: no owner, labelled as
// the operator's). Create, not apply: an existing Secret is never
// overwritten (AlreadyExists means the cache had not seen it yet; the pass
// is retried).
func (r *Reconciler) createSecret(ctx context.Context, pool *rcv1.CachePool, name string, data map[string][]byte) error {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: r.Namespace,
			Labels:    map[string]string{servers.LabelName: servers.AppName, servers.LabelManagedBy: servers.ManagerName},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	if pool != nil {
		s.Labels = servers.Labels(pool.Name)
		s.OwnerReferences = []metav1.OwnerReference{controllerReference(pool)}
	}
	if err := r.Client.Create(ctx, s, client.FieldOwner(servers.ManagerName)); err != nil {
		return fmt.Errorf("create secret %s/%s: %w", r.Namespace, name, err)
	}
	return nil
}

func controllerReference(pool *rcv1.CachePool) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         rcv1.GroupVersion.String(),
		Kind:               "CachePool",
		Name:               pool.Name,
		UID:                pool.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}
