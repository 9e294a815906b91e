package dataplane_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rackcache/rackcache/test/framework"
)

// --metrics-token-file: the metrics name volumes and subsystems, so only a
// scraper with the token reads them. A real Prometheus scrapes the
// dataplane twice, with the token (credentials_file, as the chart's
// ServiceMonitor passes the operator's Secret) and without: only the first
// gets series. The probes stay open to the kubelet. Rotating the file
// switches the token without a restart.
func TestMetricsNeedTheScrapeToken(t *testing.T) {
	dir := t.TempDir()
	serverToken := filepath.Join(dir, "server-token")
	scraperToken := filepath.Join(dir, "scraper-token")
	const first, second = "first-metrics-token-0123456789ab", "second-metrics-token-0123456789a"
	for _, f := range []string{serverToken, scraperToken} {
		if err := os.WriteFile(f, []byte(first+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", framework.FreeLoopbackPort(t))
	dp := framework.StartDataplane(t, "--metrics-listen", addr, "--metrics-token-file", serverToken)
	dp.Call(t, "bdev_malloc_create", map[string]any{"name": "Secret0", "num_blocks": 256, "block_size": 4096}, nil)

	get := func(path, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", "not-the-token-0123456789abcdefgh", http.StatusUnauthorized},
		{"/metrics", first, http.StatusOK},
		{"/healthz", "", http.StatusOK},
		{"/readyz", "", http.StatusOK},
	} {
		code, body := get(tc.path, tc.token)
		if code != tc.want {
			t.Errorf("GET %s with token %q: %d, want %d (%s)", tc.path, tc.token, code, tc.want, body)
		}
		if code == http.StatusUnauthorized && strings.Contains(body, "Secret0") {
			t.Errorf("a refused scrape shows the bdev: %s", body)
		}
	}

	prom := framework.StartPrometheus(t, fmt.Sprintf(`  - job_name: authed
    authorization:
      credentials_file: %s
    static_configs: [{targets: [%q]}]
  - job_name: anon
    static_configs: [{targets: [%q]}]
`, scraperToken, addr, addr))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	expectEventually := func(what, expr string, want func([]float64) bool) {
		t.Helper()
		var got []float64
		var err error
		for ctx.Err() == nil {
			got, err = framework.QueryPrometheus(ctx, prom, expr)
			if err == nil && want(got) {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Fatalf("%s: %s = %v (%v)", what, expr, got, err)
	}
	equals := func(v float64) func([]float64) bool {
		return func(got []float64) bool { return len(got) == 1 && got[0] == v }
	}
	expectEventually("the scraper with the token reads the bdev's series",
		`count({job="authed",bdev="Secret0"})`, func(got []float64) bool { return len(got) == 1 && got[0] > 0 })
	expectEventually("the scraper with the token is up", `up{job="authed"}`, equals(1))
	expectEventually("the scraper without it is refused", `up{job="anon"}`, equals(0))
	if got, err := framework.QueryPrometheus(ctx, prom, `{job="anon",__name__=~"rackcache_.+"}`); err != nil || len(got) != 0 {
		t.Errorf("series scraped without the token: %v, %v", got, err)
	}

	// Rotation: the server's file changes first (its scrapes fail with the
	// old token), then the scraper's; no restart on either side.
	if err := os.WriteFile(serverToken, []byte(second+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	expectEventually("the old token is refused after the server's file changed", `up{job="authed"}`, equals(0))
	if code, _ := get("/metrics", second); code != http.StatusOK {
		t.Errorf("GET /metrics with the new token: %d", code)
	}
	if err := os.WriteFile(scraperToken, []byte(second+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	expectEventually("the scraper is up again with the new token", `up{job="authed"}`, equals(1))
}
