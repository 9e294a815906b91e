package cachepool

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// Pool and server gauges, served on the operator's /metrics with
// controller-runtime's own.
var (
	poolCapacityBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rackcache_pool_capacity_bytes", Help: "Cache capacity of the pool's servers that answered.",
	}, []string{"pool"})
	poolAllocatedBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rackcache_pool_allocated_bytes", Help: "Cache capacity given to volumes in the pool.",
	}, []string{"pool"})
	poolVolumes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rackcache_pool_volumes", Help: "CachedVolumes of the pool.",
	}, []string{"pool"})
	poolServers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rackcache_pool_servers", Help: "Cache servers the pool should run.",
	}, []string{"pool"})
	poolServersReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rackcache_pool_servers_ready", Help: "Cache servers of the pool that are ready.",
	}, []string{"pool"})
	serverReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rackcache_server_ready", Help: "1 when the cache server is ready, else 0.",
	}, []string{"pool", "node", "rack"})
	serverCapacityBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rackcache_server_capacity_bytes", Help: "Cache capacity of the server.",
	}, []string{"pool", "node", "rack"})
	serverAllocatedBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rackcache_server_allocated_bytes", Help: "Cache capacity given to volumes on the server.",
	}, []string{"pool", "node", "rack"})
	serverIOPS = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rackcache_server_iops", Help: "Read and write operations per second of the server's cached volumes between the operator's last two reads.",
	}, []string{"pool", "node", "rack"})
)

var (
	poolGauges   = []*prometheus.GaugeVec{poolCapacityBytes, poolAllocatedBytes, poolVolumes, poolServers, poolServersReady}
	serverGauges = []*prometheus.GaugeVec{serverReady, serverCapacityBytes, serverAllocatedBytes, serverIOPS}
	allGauges    = append(append([]*prometheus.GaugeVec{}, poolGauges...), serverGauges...)
)

func init() {
	for _, g := range allGauges {
		metrics.Registry.MustRegister(g)
	}
}

// recordMetrics sets pool's gauges from its new status. Server series are
// replaced as a whole so a server that left the pool leaves no series.
func recordMetrics(pool string, st *rcv1.CachePoolStatus) {
	poolCapacityBytes.WithLabelValues(pool).Set(quantityValue(st.Capacity))
	poolAllocatedBytes.WithLabelValues(pool).Set(quantityValue(st.Allocated))
	poolVolumes.WithLabelValues(pool).Set(float64(st.Volumes))
	poolServers.WithLabelValues(pool).Set(float64(st.TotalServers))
	poolServersReady.WithLabelValues(pool).Set(float64(st.ReadyServers))
	for _, g := range serverGauges {
		g.DeletePartialMatch(prometheus.Labels{"pool": pool})
	}
	for _, s := range st.Servers {
		ready := 0.0
		if s.Ready {
			ready = 1
		}
		serverReady.WithLabelValues(pool, s.NodeName, s.Rack).Set(ready)
		serverCapacityBytes.WithLabelValues(pool, s.NodeName, s.Rack).Set(quantityValue(s.Capacity))
		serverAllocatedBytes.WithLabelValues(pool, s.NodeName, s.Rack).Set(quantityValue(s.Allocated))
		serverIOPS.WithLabelValues(pool, s.NodeName, s.Rack).Set(float64(s.IOPS))
	}
}

// forgetMetrics deletes every series of pool (the pool is gone).
func forgetMetrics(pool string) {
	for _, g := range allGauges {
		g.DeletePartialMatch(prometheus.Labels{"pool": pool})
	}
}

func quantityValue(q *resource.Quantity) float64 {
	if q == nil {
		return 0
	}
	return float64(q.Value())
}
