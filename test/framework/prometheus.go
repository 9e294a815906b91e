package framework

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// StartPrometheus runs Debian's prometheus on a free loopback port with
// scrapeConfigs (YAML under scrape_configs:, indented two spaces) scraped
// every second, and returns its query API once it is ready. It stops, by
// PID, when the test ends.
func StartPrometheus(t testing.TB, scrapeConfigs string) promv1.API {
	t.Helper()
	bin := RequireCommand(t, "prometheus")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	content := "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n" + scrapeConfigs
	if err := os.WriteFile(cfg, []byte(content), 0o600); err != nil {
		t.Fatalf("write prometheus.yml: %v", err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(FreeLoopbackPort(t))
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatalf("create prometheus log: %v", err)
	}
	cmd := exec.Command(bin, "--config.file", cfg, "--storage.tsdb.path", filepath.Join(dir, "data"),
		"--web.listen-address", addr, "--log.level", "warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	_ = logFile.Close()
	pid := cmd.Process.Pid
	if err := startReaper(fmt.Sprintf(`grep -qa prometheus /proc/%d/cmdline 2>/dev/null && kill -9 %d`, pid, pid)); err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			if b, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("prometheus log:\n%s", b)
			}
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus at %s not ready within 60 s: %v", addr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	c, err := api.NewClient(api.Config{Address: "http://" + addr})
	if err != nil {
		t.Fatalf("prometheus client: %v", err)
	}
	return promv1.NewAPI(c)
}

// QueryPrometheus evaluates expr now and returns its samples' values.
func QueryPrometheus(ctx context.Context, p promv1.API, expr string) ([]float64, error) {
	v, _, err := p.Query(ctx, expr, time.Now())
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("query %q: a %s, not an instant vector", expr, v.Type())
	}
	out := make([]float64, 0, len(vec))
	for _, s := range vec {
		out = append(out, float64(s.Value))
	}
	return out, nil
}
