package main

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProxyConnectsOnlyWhereAllowed runs the proxy on a Unix socket and
// sends CONNECTs as the apiserver does: a mapped node reaches its loopback
// target, a --direct address is dialed as asked, anything else is refused
// without a dial.
func TestProxyConnectsOnlyWhereAllowed(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = echo.Close() }()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	_, echoPort, _ := net.SplitHostPort(echo.Addr().String())

	table := routes{}
	if err := table.Set("10.0.3.15:10250=" + echo.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if err := table.Set("10.0.3.15:1=10.0.0.1:1"); err == nil {
		t.Fatal("a non-loopback target was accepted")
	}
	var direct hosts
	if err := direct.Set("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(t.TempDir(), "egress.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: &proxy{routes: table, direct: direct, log: slog.New(slog.NewTextHandler(io.Discard, nil))}, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()

	for _, tc := range []struct {
		target string
		want   int
	}{
		{"10.0.3.15:10250", http.StatusOK},
		{"127.0.0.1:" + echoPort, http.StatusOK},
		{"10.0.3.15:10255", http.StatusForbidden},
		{"10.0.4.1:10250", http.StatusForbidden},
	} {
		c, err := net.Dial("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "CONNECT "+tc.target+" HTTP/1.1\r\nHost: "+tc.target+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatalf("%s: %v", tc.target, err)
		}
		// A CONNECT's 200 has no body (the tunnel follows); a refusal's is text.
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Fatalf("%s: status %d, want %d", tc.target, resp.StatusCode, tc.want)
		}
		if tc.want == http.StatusOK {
			if _, err := io.WriteString(c, "ping\n"); err != nil {
				t.Fatal(err)
			}
			line, err := r.ReadString('\n')
			if err != nil || strings.TrimSpace(line) != "ping" {
				t.Fatalf("%s: echo %q, %v", tc.target, line, err)
			}
		}
		_ = c.Close()
	}
}
