package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// echoServer answers every request on a Unix socket with an error whose
// message repeats the request, as a careless server might.
func echoServer(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "echo.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			var req map[string]any
			if json.NewDecoder(conn).Decode(&req) == nil {
				raw, _ := json.Marshal(req)
				_ = json.NewEncoder(conn).Encode(map[string]any{
					"jsonrpc": "2.0", "id": req["id"],
					"error": map[string]any{"code": -13, "message": "refused: " + string(raw)},
				})
			}
			_ = conn.Close()
		}
	}()
	return sock
}

// The cephx key a request carries is cut out of the error even when the
// server repeats it; the code stays for the caller to branch on.
func TestRegisterRbdClusterErrorHidesKey(t *testing.T) {
	const key = "AQBkZXJwbGFuZS10ZXN0LWtleS1ub3QtcmVhbA=="
	c := NewUnixClient(echoServer(t))
	_, err := c.RegisterRbdCluster(context.Background(), RbdCluster{Name: "c0", MonHost: "127.0.0.1:1", Key: Secret(key)})
	var rpc *RPCError
	if !errors.As(err, &rpc) || rpc.Code != -13 {
		t.Fatalf("err = %v, want an RPCError with code -13", err)
	}
	if strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), redacted) {
		t.Errorf("the error shows the key or lost the place it was: %v", err)
	}
	// Call, the untyped path, knows no secrets but the token.
	if err := c.Call(context.Background(), "x", nil, nil); err == nil {
		t.Errorf("Call: no error")
	}
}

// A secret formats as <redacted> however it is printed or encoded.
func TestSecretNeverFormats(t *testing.T) {
	const key = "AQBzZWNyZXQtdmFsdWU="
	p := RbdCluster{Name: "c0", Key: Secret(key)}
	j, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{fmt.Sprintf("%v|%+v|%#v|%s|%q|%x", p, p, p, p.Key, p.Key, p.Key), string(j)} {
		if strings.Contains(s, key) {
			t.Errorf("formatted: %s", s)
		}
	}
	// ...while the request carries it.
	if got := p.params()["config_param"].(map[string]string)["key"]; got != key {
		t.Errorf("the request carries key %q, want the secret", got)
	}
}
