// Package e2e is rackcache's end-to-end suite: it installs the chart into
// the cluster of KUBECONFIG and runs the specs of test/e2e/specs against it.
// `make test-e2e` runs all of it on the local cluster (hack/e2e.sh brings
// hack/cluster.sh's cluster up and sets the inputs); `make test` runs the
// specs labelled "smoke". Against another cluster, set the inputs that
// test/e2e/framework/config.go lists and run `ginkgo ./test/e2e`.
package e2e

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2" //nolint:revive,staticcheck // ginkgo's DSL reads best unqualified
	. "github.com/onsi/gomega"    //nolint:revive,staticcheck // gomega's DSL reads best unqualified

	"github.com/rackcache/rackcache/test/e2e/framework"
	"github.com/rackcache/rackcache/test/e2e/specs"
)

var env specs.Env

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "rackcache e2e")
}

var _ = BeforeSuite(func(ctx context.Context) {
	cfg, err := framework.LoadConfig()
	Expect(err).NotTo(HaveOccurred())
	cluster, err := framework.NewCluster(cfg)
	Expect(err).NotTo(HaveOccurred())
	ceph, err := framework.NewCeph(cfg.Ceph)
	Expect(err).NotTo(HaveOccurred())
	prom, err := framework.NewPrometheus(cfg.PrometheusURL, cfg.PrometheusTokenFile, cfg.PrometheusOperatorTokenFile)
	Expect(err).NotTo(HaveOccurred())
	env = specs.Env{Cluster: cluster, Ceph: ceph, Prometheus: prom}
	out, err := cluster.Kubectl(ctx, "get", "nodes", "-o", "wide")
	Expect(err).NotTo(HaveOccurred())
	AddReportEntry("nodes", out)
})
