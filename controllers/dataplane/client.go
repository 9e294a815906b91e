// Package dataplane is the Go client of rackcache-dataplane's JSON-RPC 2.0
// API: SPDK's method names and parameters, over the dataplane's Unix socket
// (framed as SPDK frames it: JSON values back to back) or over HTTPS on TCP
// with a bearer token, the way the operator reaches a cache server.
//
// Every method the operator and the CSI driver use has a typed wrapper
// (bdev.go, rbd.go, adacache.go, nvmf.go, framework.go); failures come back
// as *RPCError (see errors.go). Call remains for methods without a wrapper
// (test-only bdevs such as bdev_malloc_create, fault injection).
package dataplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// Client calls one dataplane. It is safe for concurrent use.
type Client struct {
	// exactly one of socket and url is set
	socket string
	url    string
	token  string
	http   *http.Client
	// timeout bounds a call whose context has no deadline of its own.
	timeout time.Duration
	nextID  atomic.Int64
}

// DefaultTimeout bounds a call whose context carries no deadline.
const DefaultTimeout = 30 * time.Second

type options struct {
	tls     *tls.Config
	timeout time.Duration
}

// Option configures a Client.
type Option func(*options)

// WithTimeout bounds each call whose context has no deadline (default
// DefaultTimeout); a deadline on the context always wins.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

func newOptions(opts []Option) options {
	o := options{tls: &tls.Config{MinVersion: tls.VersionTLS12}, timeout: DefaultTimeout}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// NewUnixClient talks to the dataplane's Unix socket (default
// /var/tmp/spdk.sock). Each call uses a connection of its own, as SPDK's
// rpc.py does.
func NewUnixClient(socket string, opts ...Option) *Client {
	return &Client{socket: socket, timeout: newOptions(opts).timeout}
}

// WithCAPool verifies the dataplane's certificate against the CAs in pool
// only (the operator's own CA), not against the system's roots.
func WithCAPool(pool *x509.CertPool) Option {
	return func(o *options) { o.tls.RootCAs = pool }
}

// WithServerName verifies the dataplane's certificate for name instead of
// the URL's host. The operator issues one certificate per CachePool for a
// fixed DNS name, so a server's certificate survives its node's address
// changing and new nodes joining.
func WithServerName(name string) Option {
	return func(o *options) { o.tls.ServerName = name }
}

// CAPoolFromPEM is a pool holding the PEM certificates in pem (for example
// the ca.crt of the Secret the dataplane's certificate came from).
func CAPoolFromPEM(pem []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("no PEM certificate in the CA bundle")
	}
	return pool, nil
}

// NewHTTPClient talks to the dataplane's TCP endpoint (`--rpc-listen`) at
// url, presenting token: https://10.1.2.3:5260/ with WithCAPool to verify
// the server (the token and cephx keys travel in these requests), or
// http:// only against a dataplane started with --rpc-insecure.
func NewHTTPClient(url, token string, opts ...Option) *Client {
	o := newOptions(opts)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = o.tls
	// The context bounds each call (see WithTimeout), not the http.Client.
	return &Client{url: url, token: token, timeout: o.timeout, http: &http.Client{Transport: tr}}
}

type request struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	ID      int64  `json:"id"`
	Params  any    `json:"params,omitempty"`
}

type response struct {
	ID     int64           `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Call invokes method with params (nil for none) and decodes the result into
// result (nil to ignore it). Prefer the typed methods; Call is for methods
// without one.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	return c.call(ctx, method, params, result)
}

// call is Call; secrets (cephx keys the params carry) are cut out of any
// error it returns, whatever the dataplane or the transport echoed.
func (c *Client) call(ctx context.Context, method string, params, result any, secrets ...Secret) error {
	err := c.do(ctx, method, params, result)
	if err == nil {
		return nil
	}
	return redact(err, c.token, secrets)
}

func (c *Client) do(ctx context.Context, method string, params, result any) error {
	if _, ok := ctx.Deadline(); !ok && c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	req := request{JSONRPC: "2.0", Method: method, ID: c.nextID.Add(1), Params: params}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("dataplane %s: encode params: %w", method, err)
	}
	var resp response
	if c.socket != "" {
		err = c.callUnix(ctx, body, &resp)
	} else {
		err = c.callHTTP(ctx, body, &resp)
	}
	if err != nil {
		return fmt.Errorf("dataplane %s: %w", method, err)
	}
	if resp.Error != nil {
		return &RPCError{Method: method, Code: resp.Error.Code, Message: resp.Error.Message}
	}
	if resp.ID != req.ID {
		return fmt.Errorf("dataplane %s: answer for request %d, want %d", method, resp.ID, req.ID)
	}
	if result == nil {
		return nil
	}
	if err := json.Unmarshal(resp.Result, result); err != nil {
		return fmt.Errorf("dataplane %s: decode result: %w", method, err)
	}
	return nil
}

func (c *Client) callUnix(ctx context.Context, body []byte, resp *response) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.socket)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	// Closing the connection is how a cancelled context interrupts the read.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if _, err := conn.Write(body); err != nil {
		return unixError(ctx, "send", err)
	}
	if err := json.NewDecoder(conn).Decode(resp); err != nil {
		return unixError(ctx, "read answer", err)
	}
	return nil
}

// unixError reports a failed socket step as the context's error when the
// context ended it: the socket deadline equals the context's and may fire a
// moment before the context's own timer, so a socket timeout is the
// context's deadline too.
func unixError(ctx context.Context, step string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", step, ctx.Err())
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%s: %w", step, context.DeadlineExceeded)
	}
	return fmt.Errorf("%s: %w", step, err)
}

func (c *Client) callHTTP(ctx context.Context, body []byte, resp *response) error {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Authorization", "Bearer "+c.token)
	hresp, err := c.http.Do(hreq)
	if err != nil {
		return err
	}
	defer func() { _ = hresp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(hresp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	if hresp.StatusCode != http.StatusOK {
		// The token is never part of the message.
		return fmt.Errorf("HTTP %s: %s", hresp.Status, bytes.TrimSpace(data))
	}
	if err := json.Unmarshal(data, resp); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	return nil
}
