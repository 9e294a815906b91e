// Package specs holds rackcache's e2e specs as reusable functions, in the
// manner of Cluster API's e2e framework: each takes the cluster under test
// (framework.Cluster) and its own input, drives the cluster the way a user
// would (helm, kubectl, API objects) and checks the outcome with gomega. The
// suite in test/e2e composes them; other suites may too.
package specs

import (
	"time"

	"github.com/rackcache/rackcache/test/e2e/framework"
)

// Env is what every spec needs: the cluster under test, Ceph's CLI and the
// Prometheus scraping the cluster (nil when there is none).
type Env struct {
	Cluster    *framework.Cluster
	Ceph       *framework.Ceph
	Prometheus *framework.Prometheus
}

// Timeouts of the specs' waits: generous, because the compute node may be an
// emulated guest (qemu TCG) where a pod starts in seconds, not milliseconds.
const (
	installTimeout = 5 * time.Minute
	readyTimeout   = 3 * time.Minute
	podTimeout     = 4 * time.Minute
	statsTimeout   = 2 * time.Minute
	goneTimeout    = 5 * time.Minute
	poll           = 2 * time.Second
)
