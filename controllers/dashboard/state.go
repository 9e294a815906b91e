package dashboard

import (
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// State is the JSON document the page polls (GET Path+"api/state"). Byte
// figures are plain integers: the page formats them, and JavaScript numbers
// hold integers exactly up to 8 PiB.
type State struct {
	GeneratedAt         time.Time `json:"generatedAt"`
	SamplePeriodSeconds float64   `json:"samplePeriodSeconds"`
	HistorySize         int       `json:"historySize"`
	Pools               []Pool    `json:"pools"`
	Volumes             []Volume  `json:"volumes"`
	Events              []Event   `json:"events"`
	// EventsError says why Events could not be read (e.g. RBAC); the rest
	// of the page still works.
	EventsError string   `json:"eventsError,omitempty"`
	History     []Sample `json:"history"`
}

// Pool is one CachePool's row.
type Pool struct {
	Name string `json:"name"`
	// Ready is the Ready condition's status (True, False or Unknown) and
	// Reason and Message its reason and message.
	Ready          string   `json:"ready"`
	Reason         string   `json:"reason"`
	Message        string   `json:"message"`
	ReadyServers   int32    `json:"readyServers"`
	TotalServers   int32    `json:"totalServers"`
	CapacityBytes  int64    `json:"capacityBytes"`
	AllocatedBytes int64    `json:"allocatedBytes"`
	Volumes        int32    `json:"volumes"`
	Servers        []Server `json:"servers"`
}

// Server is one cache server of a pool, from the pool's status.
type Server struct {
	Node           string   `json:"node"`
	Rack           string   `json:"rack"`
	Address        string   `json:"address"`
	Ready          bool     `json:"ready"`
	Message        string   `json:"message"`
	CapacityBytes  int64    `json:"capacityBytes"`
	AllocatedBytes int64    `json:"allocatedBytes"`
	Volumes        int32    `json:"volumes"`
	Devices        []Device `json:"devices"`
}

// Device is one cache device of a server. The pool's status carries only
// its capacity; UsedBytes adds up the cache sizes of the volumes whose
// status places them on it.
type Device struct {
	Name          string `json:"name"`
	CapacityBytes int64  `json:"capacityBytes"`
	UsedBytes     int64  `json:"usedBytes"`
	FreeBytes     int64  `json:"freeBytes"`
}

// Volume is one CachedVolume's row.
type Volume struct {
	Name      string `json:"name"`
	Pool      string `json:"pool"`
	Server    string `json:"server"`
	Phase     string `json:"phase"`
	WriteMode string `json:"writeMode"`
	// Ready is the Ready condition's status (True, False or Unknown).
	Ready string `json:"ready"`
	// HitRatio is the status's text as is ("93.5%"), empty when unknown.
	HitRatio       string `json:"hitRatio"`
	CacheSizeBytes int64  `json:"cacheSizeBytes"`
	DirtyBytes     int64  `json:"dirtyBytes"`
	ReadBytes      int64  `json:"readBytes"`
	WrittenBytes   int64  `json:"writtenBytes"`
}

// buildState puts together what the page shows, sorted by name so that
// rows keep their place between polls.
func buildState(now time.Time, o Options, pools []rcv1.CachePool, volumes []rcv1.CachedVolume,
	events []Event, eventsErr string, history []Sample) State {
	s := State{
		GeneratedAt:         now.UTC(),
		SamplePeriodSeconds: o.SamplePeriod.Seconds(),
		HistorySize:         o.HistorySize,
		Pools:               make([]Pool, 0, len(pools)),
		Volumes:             make([]Volume, 0, len(volumes)),
		Events:              events,
		EventsError:         eventsErr,
		History:             history,
	}
	if s.Events == nil {
		s.Events = []Event{}
	}
	if s.History == nil {
		s.History = []Sample{}
	}
	used := deviceUse(volumes)
	for i := range pools {
		s.Pools = append(s.Pools, poolRow(&pools[i], used))
	}
	for i := range volumes {
		s.Volumes = append(s.Volumes, volumeRow(&volumes[i]))
	}
	sort.Slice(s.Pools, func(i, j int) bool { return s.Pools[i].Name < s.Pools[j].Name })
	sort.Slice(s.Volumes, func(i, j int) bool { return s.Volumes[i].Name < s.Volumes[j].Name })
	return s
}

// deviceKey names one cache device of one server of one pool.
type deviceKey struct{ pool, node, device string }

// deviceUse adds up the cache given to volumes on each device.
func deviceUse(volumes []rcv1.CachedVolume) map[deviceKey]int64 {
	used := map[deviceKey]int64{}
	for i := range volumes {
		st := &volumes[i].Status
		if st.Server == "" || st.CacheDevice == "" {
			continue
		}
		used[deviceKey{volumes[i].Spec.PoolName, st.Server, st.CacheDevice}] += bytesOf(st.CacheSize)
	}
	return used
}

func poolRow(p *rcv1.CachePool, used map[deviceKey]int64) Pool {
	ready, reason, message := condition(p.Status.Conditions)
	row := Pool{
		Name:           p.Name,
		Ready:          ready,
		Reason:         reason,
		Message:        message,
		ReadyServers:   p.Status.ReadyServers,
		TotalServers:   p.Status.TotalServers,
		CapacityBytes:  bytesOf(p.Status.Capacity),
		AllocatedBytes: bytesOf(p.Status.Allocated),
		Volumes:        p.Status.Volumes,
		Servers:        make([]Server, 0, len(p.Status.Servers)),
	}
	for _, srv := range p.Status.Servers {
		out := Server{
			Node:           srv.NodeName,
			Rack:           srv.Rack,
			Address:        srv.Address,
			Ready:          srv.Ready,
			Message:        srv.Message,
			CapacityBytes:  bytesOf(srv.Capacity),
			AllocatedBytes: bytesOf(srv.Allocated),
			Volumes:        srv.Volumes,
			Devices:        make([]Device, 0, len(srv.Devices)),
		}
		for _, d := range srv.Devices {
			capacity := d.Capacity.Value()
			u := used[deviceKey{p.Name, srv.NodeName, d.Name}]
			out.Devices = append(out.Devices, Device{
				Name: d.Name, CapacityBytes: capacity, UsedBytes: u, FreeBytes: max(capacity-u, 0),
			})
		}
		row.Servers = append(row.Servers, out)
	}
	sort.Slice(row.Servers, func(i, j int) bool { return row.Servers[i].Node < row.Servers[j].Node })
	return row
}

func volumeRow(v *rcv1.CachedVolume) Volume {
	ready, _, _ := condition(v.Status.Conditions)
	return Volume{
		Name:           v.Name,
		Pool:           v.Spec.PoolName,
		Server:         v.Status.Server,
		Phase:          string(v.Status.Phase),
		WriteMode:      string(v.Status.WriteMode),
		Ready:          ready,
		HitRatio:       v.Status.Stats.HitRatio,
		CacheSizeBytes: bytesOf(v.Status.CacheSize),
		DirtyBytes:     dirtyBytes(&v.Status.Stats),
		ReadBytes:      v.Status.Stats.ReadBytes,
		WrittenBytes:   v.Status.Stats.WrittenBytes,
	}
}

// condition returns the Ready condition's status, reason and message;
// Unknown when the status has none yet.
func condition(conds []metav1.Condition) (status, reason, message string) {
	c := meta.FindStatusCondition(conds, rcv1.ConditionReady)
	if c == nil {
		return string(metav1.ConditionUnknown), "", ""
	}
	return string(c.Status), c.Reason, c.Message
}

// bytesOf is q in bytes, 0 when unset.
func bytesOf(q *resource.Quantity) int64 {
	if q == nil {
		return 0
	}
	return q.Value()
}
