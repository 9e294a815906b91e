package framework

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// Prometheus queries the Prometheus that scrapes the cluster under test
// (RACKCACHE_E2E_PROMETHEUS_URL), through client_golang's API client.
type Prometheus struct {
	api promv1.API
	// TokenFile is where its dataplane scrape job reads the bearer token.
	TokenFile string
	// OperatorTokenFile is where its operator scrape job reads the bearer token.
	OperatorTokenFile string
}

// NewPrometheus connects to url; nil, nil when url is empty (the suite then
// skips the specs that need Prometheus, saying so). tokenFile and
// operatorTokenFile are where its dataplane and operator jobs read their
// bearer tokens.
func NewPrometheus(url, tokenFile, operatorTokenFile string) (*Prometheus, error) {
	if url == "" {
		return nil, nil
	}
	if tokenFile == "" || operatorTokenFile == "" {
		return nil, fmt.Errorf("prometheus %s lacks a token file for the dataplanes' or the operator's metrics (RACKCACHE_E2E_PROMETHEUS_TOKEN_FILE, RACKCACHE_E2E_PROMETHEUS_OPERATOR_TOKEN_FILE)", url)
	}
	c, err := api.NewClient(api.Config{Address: url})
	if err != nil {
		return nil, fmt.Errorf("prometheus client for %s: %w", url, err)
	}
	return &Prometheus{api: promv1.NewAPI(c), TokenFile: tokenFile, OperatorTokenFile: operatorTokenFile}, nil
}

// Query evaluates expr now and returns its samples.
func (p *Prometheus) Query(ctx context.Context, expr string) (model.Vector, error) {
	v, warnings, err := p.api.Query(ctx, expr, time.Now())
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	if len(warnings) > 0 {
		return nil, fmt.Errorf("query %q: warnings %v", expr, warnings)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("query %q: a %s, not an instant vector", expr, v.Type())
	}
	return vec, nil
}

// Rules returns the alerting and recording rules Prometheus evaluates.
func (p *Prometheus) Rules(ctx context.Context) (promv1.RulesResult, error) {
	return p.api.Rules(ctx)
}
