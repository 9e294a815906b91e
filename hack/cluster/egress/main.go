// Command egress is the local cluster's (hack/cluster.sh) egress proxy: the
// kube-apiserver sends every connection to a node (logs, exec,
// port-forward) through it as an HTTP CONNECT on a Unix socket
// (--egress-selector-config-file), and it connects only to the node
// addresses it was given a loopback address for, and to the addresses of
// its own network namespace (--direct). The guest node's kubelet listens at
// 10.0.3.15:10250 inside the guest, reachable only through qemu's port
// forward on 127.0.0.1; nothing may dial the guest's address itself.
//
//	egress --socket PATH --map 10.0.3.15:10250=127.0.0.1:20250 [--map ...] [--direct 10.0.4.1]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// routes maps a node's HOST:PORT to the loopback HOST:PORT that reaches it.
type routes map[string]string

func (r routes) String() string { return fmt.Sprint(map[string]string(r)) }

func (r routes) Set(s string) error {
	from, to, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("want FROM=TO, got %q", s)
	}
	for _, hp := range []string{from, to} {
		if _, _, err := net.SplitHostPort(hp); err != nil {
			return fmt.Errorf("%q: %w", hp, err)
		}
	}
	host, _, _ := net.SplitHostPort(to)
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q: the target must be a loopback address", to)
	}
	r[from] = to
	return nil
}

func main() {
	socket := flag.String("socket", "", "the Unix socket to listen on")
	table := routes{}
	flag.Var(table, "map", "repeatable: NODE_HOST:PORT=LOOPBACK_HOST:PORT")
	var direct hosts
	flag.Var(&direct, "direct", "repeatable: an address of this network namespace, dialed as asked (any port)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *socket == "" {
		log.Error("--socket is required")
		os.Exit(2)
	}
	if err := run(*socket, &proxy{routes: table, direct: direct, log: log}, log); err != nil {
		log.Error("egress proxy stopped", "err", err)
		os.Exit(1)
	}
}

// hosts are the --direct addresses.
type hosts []string

func (h *hosts) String() string { return strings.Join(*h, ",") }

func (h *hosts) Set(s string) error {
	if net.ParseIP(s) == nil {
		return fmt.Errorf("%q is not an IP address", s)
	}
	*h = append(*h, s)
	return nil
}

func run(socket string, p *proxy, log *slog.Logger) error {
	_ = os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", socket, err)
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Info("egress proxy listening", "socket", socket, "routes", p.routes.String(), "direct", p.direct.String())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

type proxy struct {
	routes routes
	direct hosts
	log    *slog.Logger
}

// target is where a CONNECT to node goes, if anywhere.
func (p *proxy) target(node string) (string, bool) {
	if to, ok := p.routes[node]; ok {
		return to, true
	}
	host, _, err := net.SplitHostPort(node)
	if err != nil {
		return "", false
	}
	for _, h := range p.direct {
		if h == host {
			return node, true
		}
	}
	return "", false
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "only CONNECT", http.StatusMethodNotAllowed)
		return
	}
	to, ok := p.target(r.Host)
	if !ok {
		p.log.Info("refused: no route", "node", r.Host)
		http.Error(w, fmt.Sprintf("no route to %s", r.Host), http.StatusForbidden)
		return
	}
	upstream, err := net.DialTimeout("tcp", to, 10*time.Second)
	if err != nil {
		http.Error(w, fmt.Sprintf("dial %s: %v", to, err), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = upstream.Close()
		http.Error(w, "cannot hijack", http.StatusInternalServerError)
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		_ = upstream.Close()
		return
	}
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		_ = client.Close()
		_ = upstream.Close()
		return
	}
	// Bytes the client sent after its request line are in buf already.
	splice(client, io.MultiReader(buf, client), upstream)
}

// splice copies both ways until either side ends, then closes both.
func splice(client net.Conn, fromClient io.Reader, upstream net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(upstream, fromClient)
		_ = upstream.Close()
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(client, upstream)
		_ = client.Close()
	}()
	wg.Wait()
}
