package config

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rackcache/rackcache/test/framework"
)

// The chart's Grafana dashboards: each parses, every panel has queries,
// every query is valid PromQL (promtool parses it as a recording rule with
// the template variables filled in), and every rackcache_* series a query
// names is one the operator or the dataplane exports (their sources name
// each family once). That the queries return data from a live cluster is
// left to the e2e suite.
func TestDashboards(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir(), "dashboards", "*.json"))
	if err != nil || len(files) != 3 {
		t.Fatalf("dashboards: %v, %v", files, err)
	}
	exported := exportedMetrics(t)
	var exprs []string
	uids := map[string]string{}
	for _, f := range files {
		var d struct {
			UID    string `json:"uid"`
			Title  string `json:"title"`
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if d.UID == "" || uids[d.UID] != "" || len(d.Panels) == 0 {
			t.Errorf("%s: uid %q (also in %q), %d panels", f, d.UID, uids[d.UID], len(d.Panels))
		}
		uids[d.UID] = f
		for _, p := range d.Panels {
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", d.Title, p.Title)
			}
			for _, tg := range p.Targets {
				for _, m := range metricName.FindAllString(tg.Expr, -1) {
					if !exported[m] {
						t.Errorf("%s: panel %q queries %s, which nothing exports", d.Title, p.Title, m)
					}
				}
				exprs = append(exprs, tg.Expr)
			}
		}
	}
	checkPromQL(t, exprs)
}

var metricName = regexp.MustCompile(`\brackcache_[a-z_]+\b`)

// exportedMetrics are the metric families named in the operator's and the
// dataplane's sources.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	quoted := regexp.MustCompile(`"(rackcache_[a-z_]+)"`)
	for _, root := range []string{"controllers", filepath.Join("dataplane", "daemon", "src")} {
		err := filepath.Walk(filepath.Join(framework.RepoRoot(), root), func(path string, info os.FileInfo, err error) error {
			source := strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".rs")
			if err != nil || info.IsDir() || !source || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			for _, m := range quoted.FindAllSubmatch(b, -1) {
				out[string(m[1])] = true
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(out) < 20 {
		t.Fatalf("only %d metric families found in the sources: %v", len(out), out)
	}
	return out
}

// checkPromQL parses each expression with promtool, as recording rules.
func checkPromQL(t *testing.T, exprs []string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		framework.MissingDependency(t, "promtool is missing (hack/deps.sh apt installs Debian's prometheus): %v", err)
	}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboards\n    rules:\n")
	vars := strings.NewReplacer("$pool", ".*", "$volume", ".*", "$server", ".*")
	for i, e := range exprs {
		q, _ := json.Marshal(vars.Replace(e))
		fmt.Fprintf(&rules, "      - record: rackcache:dashboard_query_%d\n        expr: %s\n", i, q)
	}
	file := filepath.Join(t.TempDir(), "queries.yaml")
	if err := os.WriteFile(file, []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the dashboards' queries: %v\n%s", err, out)
	}
}
