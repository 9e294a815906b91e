package dataplane_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/test/framework"
)

// The operator's Go client against the real dataplane: the Unix socket, the
// token-protected TCP endpoint over TLS verified against the test's CA, and
// the error codes the reconcilers branch on.
func TestGoClientAgainstDataplane(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	const token = "a-test-token-of-32-characters-xx"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := framework.FreeLoopbackPort(t)
	pki := framework.NewDataplaneTLS(t)
	dp := framework.StartDataplane(t, pki.Args(fmt.Sprintf("127.0.0.1:%d", port), tokenFile)...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var version struct {
		Version string `json:"version"`
	}
	if err := dp.Client.Call(ctx, "spdk_get_version", nil, &version); err != nil || version.Version == "" {
		t.Fatalf("spdk_get_version over the Unix socket: %+v, %v", version, err)
	}

	url := fmt.Sprintf("https://127.0.0.1:%d/", port)
	pool, err := dataplane.CAPoolFromPEM(pki.CAPEM)
	if err != nil {
		t.Fatal(err)
	}
	good := dataplane.NewHTTPClient(url, token, dataplane.WithCAPool(pool))
	var name string
	if err := good.Call(ctx, "bdev_malloc_create", map[string]any{"name": "M0", "num_blocks": 256, "block_size": 4096}, &name); err != nil || name != "M0" {
		t.Fatalf("bdev_malloc_create over HTTPS with the token: %q, %v", name, err)
	}

	// A client trusting another CA refuses the server before sending
	// anything (the token included).
	other := framework.NewDataplaneTLS(t)
	wrongCA := dataplane.NewHTTPClient(url, token, dataplane.WithCAPool(other.CAPool))
	err = wrongCA.Call(ctx, "bdev_malloc_create", map[string]any{"name": "M3", "num_blocks": 256, "block_size": 4096}, nil)
	var unknownAuthority x509.UnknownAuthorityError
	if !errors.As(err, &unknownAuthority) {
		t.Errorf("a client trusting another CA: err = %v, want an unknown authority error", err)
	}
	// Plain HTTP to the TLS endpoint gets no answer.
	plain := dataplane.NewHTTPClient(fmt.Sprintf("http://127.0.0.1:%d/", port), token)
	if err := plain.Call(ctx, "bdev_malloc_create", map[string]any{"name": "M4", "num_blocks": 256, "block_size": 4096}, nil); err == nil {
		t.Errorf("plain HTTP to the TLS endpoint was served")
	}

	bad := dataplane.NewHTTPClient(url, "not-the-token-but-long-enough-00", dataplane.WithCAPool(pool))
	err = bad.Call(ctx, "bdev_malloc_create", map[string]any{"name": "M1", "num_blocks": 256, "block_size": 4096}, nil)
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a wrong token: err = %v, want an HTTP 401 refusal", err)
	}
	if strings.Contains(fmt.Sprint(err), "not-the-token") {
		t.Errorf("the error repeats the token: %v", err)
	}

	if err := dp.Client.Call(ctx, "no_such_method", nil, nil); !dataplane.IsCode(err, dataplane.CodeMethodNotFound) {
		t.Errorf("unknown method: err = %v, want code %d", err, dataplane.CodeMethodNotFound)
	}
	err = dp.Client.Call(ctx, "bdev_malloc_create", map[string]any{"name": "M2", "num_blocks": 256, "block_size": 4096, "colour": "red"}, nil)
	if !dataplane.IsCode(err, dataplane.CodeInvalidParams) {
		t.Errorf("unknown parameter: err = %v, want code %d", err, dataplane.CodeInvalidParams)
	}

	// Only the bdev created with the right token exists.
	var bdevs []struct {
		Name string `json:"name"`
	}
	if err := dp.Client.Call(ctx, "bdev_get_bdevs", nil, &bdevs); err != nil {
		t.Fatal(err)
	}
	if len(bdevs) != 1 || bdevs[0].Name != "M0" {
		t.Errorf("bdevs after the refused calls: %+v, want only M0", bdevs)
	}
}
