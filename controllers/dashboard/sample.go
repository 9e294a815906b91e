package dashboard

import (
	"strconv"
	"strings"
	"time"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// Sample is what the charts draw at one point in time: the statistics the
// CachedVolume reconciler last wrote into each volume's status.
type Sample struct {
	Time time.Time `json:"time"`
	// ReadBytes, WrittenBytes and DirtyBytes are totals over the volumes.
	ReadBytes    int64 `json:"readBytes"`
	WrittenBytes int64 `json:"writtenBytes"`
	DirtyBytes   int64 `json:"dirtyBytes"`
	// Volumes are the per-volume figures, by volume name.
	Volumes map[string]VolumeSample `json:"volumes"`
}

// VolumeSample is one volume's figures in a Sample.
type VolumeSample struct {
	// HitRatio is the read hit ratio in percent; nil while the status has
	// none (the volume was never read from its server), so the chart shows
	// a gap instead of a false zero.
	HitRatio     *float64 `json:"hitRatio"`
	ReadBytes    int64    `json:"readBytes"`
	WrittenBytes int64    `json:"writtenBytes"`
	DirtyBytes   int64    `json:"dirtyBytes"`
}

// takeSample reads a Sample out of the volumes' statuses.
func takeSample(at time.Time, volumes []rcv1.CachedVolume) Sample {
	s := Sample{Time: at.UTC(), Volumes: make(map[string]VolumeSample, len(volumes))}
	for i := range volumes {
		st := &volumes[i].Status.Stats
		v := VolumeSample{ReadBytes: st.ReadBytes, WrittenBytes: st.WrittenBytes, DirtyBytes: dirtyBytes(st)}
		if hr, ok := parseHitRatio(st.HitRatio); ok {
			v.HitRatio = &hr
		}
		s.Volumes[volumes[i].Name] = v
		s.ReadBytes += v.ReadBytes
		s.WrittenBytes += v.WrittenBytes
		s.DirtyBytes += v.DirtyBytes
	}
	return s
}

// dirtyBytes is the status's dirty quantity in bytes, 0 when unset.
func dirtyBytes(st *rcv1.VolumeStats) int64 {
	if st.Dirty == nil {
		return 0
	}
	return st.Dirty.Value()
}

// parseHitRatio reads the status's hit ratio, a percentage such as "93.5%"
// (the reconciler formats it for kubectl's column), back into a number.
func parseHitRatio(s string) (float64, bool) {
	num, ok := strings.CutSuffix(strings.TrimSpace(s), "%")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseFloat(num, 64)
	// Written as a negated range so that NaN, which JSON cannot carry, fails too.
	if err != nil || !(v >= 0 && v <= 100) {
		return 0, false
	}
	return v, true
}
