package specs

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	. "github.com/onsi/ginkgo/v2" //nolint:revive,staticcheck // ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive,staticcheck // gomega's DSL reads best unqualified
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// requirePrometheus skips a spec when the suite has no Prometheus (fails
// under CI=true, where nothing may skip).
func requirePrometheus(env Env) {
	if env.Prometheus != nil {
		return
	}
	if os.Getenv("CI") == "true" {
		Fail("RACKCACHE_E2E_PROMETHEUS_URL is not set (CI=true: nothing may skip)")
	}
	Skip("RACKCACHE_E2E_PROMETHEUS_URL is not set: no Prometheus to check")
}

// scraperAccount is the ServiceAccount the suite's Prometheus scrapes the
// operator as: a Prometheus in the cluster would use its own.
const scraperAccount = "e2e-prometheus"

// The operator's scrape token for the dataplanes, by its documented name
// (docs/operator.md): the suite sees the product as a user does.
const (
	scrapeTokenSecret = "rackcache-dataplane-metrics"
	scrapeTokenKey    = "token"
)

// giveScrapeTokens gives Prometheus what a Prometheus in the cluster
// would have: for the dataplanes, the operator's scrape token (the Secret
// the dataplane ServiceMonitor names); for the operator, a ServiceAccount
// token allowed to get /metrics (the chart's rackcache-metrics-reader).
// Without them both refuse the scrapes.
func giveScrapeTokens(ctx context.Context, env Env) {
	ns := env.Cluster.Config.Namespace
	for _, args := range [][]string{
		{"create", "serviceaccount", scraperAccount, "-n", ns},
		{"create", "clusterrolebinding", scraperAccount, "--clusterrole=rackcache-metrics-reader", "--serviceaccount=" + ns + ":" + scraperAccount},
	} {
		out, err := env.Cluster.Kubectl(ctx, args...)
		if err != nil && !strings.Contains(out+err.Error(), "already exists") {
			Fail(fmt.Sprintf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out))
		}
	}
	token, err := env.Cluster.Kubectl(ctx, "create", "token", scraperAccount, "-n", ns, "--duration=2h")
	Expect(err).NotTo(HaveOccurred(), "a token of ServiceAccount %s", scraperAccount)
	Expect(os.WriteFile(env.Prometheus.OperatorTokenFile, []byte(strings.TrimSpace(token)), 0o600)).To(Succeed())
	giveDataplaneToken(ctx, env)
}

func giveDataplaneToken(ctx context.Context, env Env) {
	var token string
	Eventually(func(g Gomega) { token = scrapeToken(ctx, g, env) }).
		WithContext(ctx).WithTimeout(readyTimeout).WithPolling(poll).Should(Succeed(), "the operator's scrape token Secret")
	Expect(os.WriteFile(env.Prometheus.TokenFile, []byte(token), 0o600)).To(Succeed())
}

// scrapeToken is the operator's scrape token for the dataplanes' /metrics.
func scrapeToken(ctx context.Context, g Gomega, env Env) string {
	var s corev1.Secret
	g.Expect(env.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: env.Cluster.Config.Namespace, Name: scrapeTokenSecret}, &s)).To(Succeed())
	g.Expect(s.Data).To(HaveKey(scrapeTokenKey))
	return string(s.Data[scrapeTokenKey])
}

// ExpectHitRatioInPrometheus waits until Prometheus has scraped the
// volume's hit ratio from the operator and its cache counters from the
// dataplane serving it.
func ExpectHitRatioInPrometheus(ctx context.Context, env Env, v *Volume) {
	requirePrometheus(env)
	giveScrapeTokens(ctx, env)
	By("querying Prometheus for the hit ratio of " + v.CachedVolume)
	// The operator reports the volume once; each server holding a copy
	// (the owner, and a mirror if it has one) reports its cache's.
	copies := 1
	if v.GetCachedVolume(ctx, env).Status.Mirror != "" {
		copies = 2
	}
	for expr, series := range map[string]int{
		fmt.Sprintf(`rackcache_volume_hit_ratio{volume=%q}`, v.CachedVolume):                            1,
		fmt.Sprintf(`rackcache_cache_read_hit_ratio{volume=~".*%s"}`, regexp.QuoteMeta(v.CachedVolume)): copies,
	} {
		Eventually(func(g Gomega) {
			vec, err := env.Prometheus.Query(ctx, expr)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(vec).To(HaveLen(series), "%s", expr)
			AddReportEntry(expr, vec.String())
		}).WithContext(ctx).WithTimeout(statsTimeout).WithPolling(poll).Should(Succeed())
	}
}

// ExpectDashboardsHaveData runs every query of every panel of the chart's
// Grafana dashboards (variables set to match everything) and expects each
// to return data: no panel shows "no data" on a healthy cluster.
func ExpectDashboardsHaveData(ctx context.Context, env Env) {
	requirePrometheus(env)
	giveScrapeTokens(ctx, env)
	files, err := filepath.Glob(filepath.Join(env.Cluster.Config.RepoRoot, "charts", "rackcache", "dashboards", "*.json"))
	Expect(err).NotTo(HaveOccurred())
	Expect(files).NotTo(BeEmpty())
	vars := strings.NewReplacer(`"$volume"`, `".+"`, `"$pool"`, `".+"`, "$__rate_interval", "1m")
	var queries []string
	for _, f := range files {
		queries = append(queries, dashboardQueries(f)...)
	}
	By(fmt.Sprintf("running the %d queries of %d dashboards", len(queries), len(files)))
	Eventually(func(g Gomega) {
		var empty []string
		for _, q := range queries {
			vec, err := env.Prometheus.Query(ctx, vars.Replace(q))
			g.Expect(err).NotTo(HaveOccurred())
			if len(vec) == 0 {
				empty = append(empty, q)
			}
		}
		g.Expect(empty).To(BeEmpty(), "panels without data")
	}).WithContext(ctx).WithTimeout(statsTimeout).WithPolling(poll).Should(Succeed())
}

// dashboardQueries lists the expr of every panel target of a dashboard.
func dashboardQueries(file string) []string {
	b, err := os.ReadFile(file)
	Expect(err).NotTo(HaveOccurred())
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	Expect(json.Unmarshal(b, &d)).To(Succeed(), file)
	var out []string
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			if t.Expr != "" {
				out = append(out, t.Expr)
			}
		}
	}
	Expect(out).NotTo(BeEmpty(), "%s has no queries", file)
	return out
}

// metricName finds the rackcache metric families an expression reads.
var metricName = regexp.MustCompile(`\brackcache_[a-z0-9_]+`)

// ExpectAlertsHealthy checks the chart's alerting rules as Prometheus
// evaluates them: every rule of rules/alerts.yaml is loaded and evaluates
// without error, every metric family it reads has series (so it can fire),
// and every one is inactive (neither pending nor firing) on a healthy
// cluster.
func ExpectAlertsHealthy(ctx context.Context, env Env) {
	requirePrometheus(env)
	By("checking the chart's alerting rules in Prometheus")
	Eventually(func(g Gomega) {
		rules, err := env.Prometheus.Rules(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		var alerts []promv1.AlertingRule
		for _, group := range rules.Groups {
			for _, r := range group.Rules {
				if a, ok := r.(promv1.AlertingRule); ok {
					alerts = append(alerts, a)
				}
			}
		}
		g.Expect(alerts).To(HaveLen(alertsInChart(env.Cluster.Config.RepoRoot)), "alerting rules loaded")
		for _, a := range alerts {
			g.Expect(string(a.Health)).To(Equal(promv1.RuleHealthGood), "alert %s: %s", a.Name, a.LastError)
			g.Expect(a.State).To(Equal("inactive"), "alert %s is %s on a healthy cluster", a.Name, a.State)
			for _, family := range metricName.FindAllString(a.Query, -1) {
				vec, err := env.Prometheus.Query(ctx, "count("+family+")")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(vec).NotTo(BeEmpty(), "alert %s reads %s, which has no series", a.Name, family)
			}
		}
	}).WithContext(ctx).WithTimeout(statsTimeout).WithPolling(poll).Should(Succeed())
}

// alertsInChart counts the alerts of charts/rackcache/rules/alerts.yaml.
func alertsInChart(repoRoot string) int {
	b, err := os.ReadFile(filepath.Join(repoRoot, "charts", "rackcache", "rules", "alerts.yaml"))
	Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "- alert:"); ok {
			names = append(names, strings.TrimSpace(name))
		}
	}
	sort.Strings(names)
	Expect(names).NotTo(BeEmpty())
	return len(names)
}
