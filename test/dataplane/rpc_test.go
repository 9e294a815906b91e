package dataplane_test

import (
	"context"
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
// token-protected TCP endpoint, and the error codes the reconcilers branch
// on.
func TestGoClientAgainstDataplane(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	const token = "a-test-token-of-32-characters-xx"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := framework.FreeLoopbackPort(t)
	dp := framework.StartDataplane(t, "--rpc-listen", fmt.Sprintf("127.0.0.1:%d", port), "--rpc-token-file", tokenFile)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var version struct {
		Version string `json:"version"`
	}
	if err := dp.Client.Call(ctx, "spdk_get_version", nil, &version); err != nil || version.Version == "" {
		t.Fatalf("spdk_get_version over the Unix socket: %+v, %v", version, err)
	}

	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	good := dataplane.NewHTTPClient(url, token)
	var name string
	if err := good.Call(ctx, "bdev_malloc_create", map[string]any{"name": "M0", "num_blocks": 256, "block_size": 4096}, &name); err != nil || name != "M0" {
		t.Fatalf("bdev_malloc_create over HTTP with the token: %q, %v", name, err)
	}

	bad := dataplane.NewHTTPClient(url, "not-the-token-but-long-enough-00")
	err := bad.Call(ctx, "bdev_malloc_create", map[string]any{"name": "M1", "num_blocks": 256, "block_size": 4096}, nil)
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
