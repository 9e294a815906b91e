package servers

import (
	"context"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TokenLifetime is how long a minted RPC token is valid: the shortest the
// API server issues. It is renewed at half its life.
const TokenLifetime = 10 * time.Minute

// Tokens mints the operator's bearer tokens for the dataplanes' JSON-RPC
// ports: ServiceAccount tokens (TokenRequest) of ServiceAccount, one
// audience per server (RPCAudience), kept in memory only. No Secret holds
// them, so nothing but the operator can read them, and a server that
// leaks the tokens it was sent exposes no other server.
type Tokens struct {
	// Client creates the TokenRequests (serviceaccounts/token, create, on
	// ServiceAccount only).
	Client client.SubResourceClientConstructor
	// Namespace and ServiceAccount name the operator's ServiceAccount.
	Namespace, ServiceAccount string
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	mu     sync.Mutex
	minted map[string]minted
}

type minted struct {
	token          string
	renew, expires time.Time
}

// Caller is the username the servers must let in.
func (t *Tokens) Caller() string { return ServiceAccountUser(t.Namespace, t.ServiceAccount) }

// Token returns a token for audience, minting one when none is held or the
// held one is past half its life.
func (t *Tokens) Token(ctx context.Context, audience string) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if m, ok := t.minted[audience]; ok && now.Before(m.renew) {
		return m.token, nil
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Name: t.ServiceAccount}}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{audience},
		ExpirationSeconds: ptr.To(int64(TokenLifetime / time.Second)),
	}}
	if err := t.Client.SubResource("token").Create(ctx, sa, req); err != nil {
		return "", fmt.Errorf("request a token of serviceaccount %s/%s for %s: %w", t.Namespace, t.ServiceAccount, audience, err)
	}
	expires := req.Status.ExpirationTimestamp.Time
	if t.minted == nil {
		t.minted = map[string]minted{}
	}
	// Forget tokens of servers that are gone.
	for a, m := range t.minted {
		if !now.Before(m.expires) {
			delete(t.minted, a)
		}
	}
	t.minted[audience] = minted{token: req.Status.Token, renew: now.Add(expires.Sub(now) / 2), expires: expires}
	return req.Status.Token, nil
}

func (t *Tokens) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}
