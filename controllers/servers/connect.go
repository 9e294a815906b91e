package servers

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rackcache/rackcache/controllers/dataplane"
)

// Connector makes JSON-RPC clients for a pool's servers: each call carries
// a token of the operator's ServiceAccount for that one server (Tokens),
// and each server's certificate is verified against the pool's CA (its
// TLS Secret in Namespace) for TLSServerName(pool).
type Connector struct {
	// Reader reads the TLS Secret (the manager's client).
	Reader client.Reader
	// Tokens mints the bearer tokens.
	Tokens *Tokens
	// Namespace is the operator's namespace, where the Secrets live.
	Namespace string
	// Timeout bounds each call (dataplane.DefaultTimeout when zero).
	Timeout time.Duration
	// Port overrides RPCPort (tests only; zero means RPCPort).
	Port int
}

// Client returns a client for pool's server on node, reached at address.
// It fails when the pool's TLS Secret is missing or malformed (the
// CachePool reconciler creates it) or no token can be minted.
func (c *Connector) Client(ctx context.Context, pool, node, address string) (*dataplane.Client, error) {
	if address == "" {
		return nil, fmt.Errorf("server of pool %s on node %s has no address yet", pool, node)
	}
	token, err := c.Tokens.Token(ctx, RPCAudience(c.Namespace, pool, node))
	if err != nil {
		return nil, err
	}
	caPEM, err := c.secretKey(ctx, TLSSecretName(pool), CACertKey)
	if err != nil {
		return nil, err
	}
	cas, err := dataplane.CAPoolFromPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s key %s: %w", c.Namespace, TLSSecretName(pool), CACertKey, err)
	}
	port := c.Port
	if port == 0 {
		port = RPCPort
	}
	opts := []dataplane.Option{dataplane.WithCAPool(cas), dataplane.WithServerName(TLSServerName(pool))}
	if c.Timeout > 0 {
		opts = append(opts, dataplane.WithTimeout(c.Timeout))
	}
	url := "https://" + net.JoinHostPort(address, strconv.Itoa(port)) + "/"
	return dataplane.NewHTTPClient(url, token, opts...), nil
}

func (c *Connector) secretKey(ctx context.Context, name, key string) ([]byte, error) {
	var s corev1.Secret
	if err := c.Reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, &s); err != nil {
		return nil, fmt.Errorf("read secret %s/%s: %w", c.Namespace, name, err)
	}
	v := s.Data[key]
	if len(v) == 0 {
		return nil, fmt.Errorf("secret %s/%s has no key %s", c.Namespace, name, key)
	}
	return v, nil
}
