package cachedvolume

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Per-volume figures read from the dataplanes, for dashboards; a volume's
// series are deleted with it.
var (
	volumeLabels = []string{"volume", "pool", "server"}

	hitRatioGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rackcache_volume_hit_ratio",
		Help: "Read hit ratio of a cached volume (0 to 1) since it was created on its server.",
	}, volumeLabels)
	readBytesGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rackcache_volume_read_bytes",
		Help: "Bytes hosts read from a cached volume since it was created on its server.",
	}, volumeLabels)
	writtenBytesGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rackcache_volume_written_bytes",
		Help: "Bytes hosts wrote to a cached volume since it was created on its server.",
	}, volumeLabels)
	dirtyBytesGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rackcache_volume_dirty_bytes",
		Help: "Bytes of a write-back volume not yet written to Ceph.",
	}, volumeLabels)
	cacheSizeGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rackcache_volume_cache_size_bytes",
		Help: "Cache capacity given to a volume.",
	}, volumeLabels)

	volumeGauges = []*prometheus.GaugeVec{hitRatioGauge, readBytesGauge, writtenBytesGauge, dirtyBytesGauge, cacheSizeGauge}
)

func init() {
	for _, g := range volumeGauges {
		metrics.Registry.MustRegister(g)
	}
}

// volumeMetrics are one volume's figures.
type volumeMetrics struct {
	HitRatio     float64
	ReadBytes    uint64
	WrittenBytes uint64
	DirtyBytes   uint64
	CacheSize    int64
}

// recordVolumeMetrics publishes a volume's figures, dropping series of the
// volume under another pool or server (it moved).
func recordVolumeMetrics(volume, pool, server string, m volumeMetrics) {
	forgetVolumeMetrics(volume)
	l := prometheus.Labels{"volume": volume, "pool": pool, "server": server}
	hitRatioGauge.With(l).Set(m.HitRatio)
	readBytesGauge.With(l).Set(float64(m.ReadBytes))
	writtenBytesGauge.With(l).Set(float64(m.WrittenBytes))
	dirtyBytesGauge.With(l).Set(float64(m.DirtyBytes))
	cacheSizeGauge.With(l).Set(float64(m.CacheSize))
}

// forgetVolumeMetrics deletes every series of volume.
func forgetVolumeMetrics(volume string) {
	for _, g := range volumeGauges {
		g.DeletePartialMatch(prometheus.Labels{"volume": volume})
	}
}
