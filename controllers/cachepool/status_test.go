package cachepool

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/servers"
)

const gib = int64(1) << 30

func readyReading(node, rack string, capacity, allocated int64, volumes int32) serverReading {
	return serverReading{
		Server:         servers.Server{NodeName: node, Rack: rack, Address: "10.0.0." + node[len(node)-1:], PodName: "dp-" + node, PodReady: true, NodeReady: true},
		Answered:       true,
		Version:        "rackcache-dataplane 0.1.0",
		CapacityBytes:  capacity,
		AllocatedBytes: allocated,
		Volumes:        volumes,
		IOPS:           42,
	}
}

type wantCondition struct {
	status metav1.ConditionStatus
	reason string
	// message holds this fragment
	message string
}

func TestComputeStatus(t *testing.T) {
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	unanswered := serverReading{
		Server:  servers.Server{NodeName: "n2", Rack: "b", Address: "10.0.0.2", PodName: "dp-n2", PodReady: true},
		Failure: "dataplane spdk_get_version: connection refused",
	}
	missingDevice := readyReading("n2", "b", gib, 0, 0)
	missingDevice.MissingCacheBdevs = []string{"cache1"}
	degraded := readyReading("n2", "b", gib, 0, 1)
	degraded.DegradedVolumes = []string{"vol-x"}

	cases := []struct {
		name         string
		o            observation
		ready, total int32
		capacity     int64
		allocated    int64
		conditions   map[string]wantCondition
		notReady     map[string]string // node -> message fragment
	}{
		{
			name:  "no servers",
			o:     observation{Succeeded: true},
			ready: 0, total: 0,
			conditions: map[string]wantCondition{
				rcv1.ConditionReady:       {metav1.ConditionFalse, rcv1.ReasonNoServers, "no node matches"},
				rcv1.ConditionDegraded:    {metav1.ConditionFalse, rcv1.ReasonAsExpected, ""},
				rcv1.ConditionProgressing: {metav1.ConditionFalse, rcv1.ReasonAsExpected, ""},
			},
		},
		{
			name:  "scheduled but no pod yet",
			o:     observation{DesiredScheduled: 1, Rollout: "0 of 1 server(s) run the current pod template", Succeeded: true},
			ready: 0, total: 1,
			conditions: map[string]wantCondition{
				rcv1.ConditionReady:       {metav1.ConditionFalse, rcv1.ReasonServersNotReady, "no dataplane pod yet"},
				rcv1.ConditionProgressing: {metav1.ConditionTrue, rcv1.ReasonRollingOut, "0 of 1"},
			},
		},
		{
			name:  "one ready server",
			o:     observation{Readings: []serverReading{readyReading("n1", "a", 10*gib, 2*gib, 3)}, DesiredScheduled: 1, Succeeded: true},
			ready: 1, total: 1, capacity: 10 * gib, allocated: 2 * gib,
			conditions: map[string]wantCondition{
				rcv1.ConditionReady:    {metav1.ConditionTrue, rcv1.ReasonAsExpected, "1 of 1"},
				rcv1.ConditionDegraded: {metav1.ConditionFalse, rcv1.ReasonAsExpected, ""},
			},
		},
		{
			name: "two ready servers",
			o: observation{Readings: []serverReading{readyReading("n1", "a", 10*gib, 2*gib, 3), readyReading("n2", "b", 5*gib, gib, 1)},
				DesiredScheduled: 2, Succeeded: true},
			ready: 2, total: 2, capacity: 15 * gib, allocated: 3 * gib,
			conditions: map[string]wantCondition{
				rcv1.ConditionReady:    {metav1.ConditionTrue, rcv1.ReasonAsExpected, "2 of 2"},
				rcv1.ConditionDegraded: {metav1.ConditionFalse, rcv1.ReasonAsExpected, ""},
			},
		},
		{
			name:  "one of two does not answer",
			o:     observation{Readings: []serverReading{readyReading("n1", "a", 10*gib, 2*gib, 3), unanswered}, DesiredScheduled: 2, Succeeded: true},
			ready: 1, total: 2, capacity: 10 * gib, allocated: 2 * gib,
			conditions: map[string]wantCondition{
				rcv1.ConditionReady:    {metav1.ConditionTrue, rcv1.ReasonAsExpected, "1 of 2"},
				rcv1.ConditionDegraded: {metav1.ConditionTrue, rcv1.ReasonServersNotReady, "n2: dataplane spdk_get_version: connection refused"},
			},
			notReady: map[string]string{"n2": "spdk_get_version"},
		},
		{
			name:  "a cache device missing",
			o:     observation{Readings: []serverReading{readyReading("n1", "a", 10*gib, 0, 0), missingDevice}, Succeeded: true},
			ready: 1, total: 2, capacity: 11 * gib,
			conditions: map[string]wantCondition{
				rcv1.ConditionDegraded: {metav1.ConditionTrue, rcv1.ReasonServersNotReady, "cache1"},
			},
			notReady: map[string]string{"n2": "cache bdev(s) missing: cache1"},
		},
		{
			name:  "a degraded volume",
			o:     observation{Readings: []serverReading{degraded}, Succeeded: true},
			ready: 0, total: 1, capacity: gib,
			conditions: map[string]wantCondition{
				rcv1.ConditionReady: {metav1.ConditionFalse, rcv1.ReasonServersNotReady, "vol-x"},
			},
			notReady: map[string]string{"n2": "degraded"},
		},
		{
			name: "Ceph unresolvable",
			o: observation{Readings: []serverReading{readyReading("n1", "a", 10*gib, 0, 0)},
				CephError: "read Rook monitors, ConfigMap rook-ceph/rook-ceph-mon-endpoints: not found", Succeeded: true},
			ready: 1, total: 1, capacity: 10 * gib,
			conditions: map[string]wantCondition{
				rcv1.ConditionReady: {metav1.ConditionFalse, rcv1.ReasonCephUnavailable, "rook-ceph-mon-endpoints"},
			},
		},
		{
			name:  "deletion held by volumes",
			o:     observation{Readings: []serverReading{readyReading("n1", "a", 10*gib, 0, 2)}, Volumes: 2, Deleting: true, Succeeded: true},
			ready: 1, total: 1, capacity: 10 * gib,
			conditions: map[string]wantCondition{
				rcv1.ConditionReady: {metav1.ConditionFalse, rcv1.ReasonDeleting, "2 CachedVolume(s)"},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Generation = 7
			tc.o.Now = now
			st := computeStatus(&rcv1.CachePoolStatus{}, &tc.o)
			if st.ReadyServers != tc.ready || st.TotalServers != tc.total {
				t.Errorf("ready/total %d/%d, want %d/%d", st.ReadyServers, st.TotalServers, tc.ready, tc.total)
			}
			if len(tc.o.Readings) > 0 {
				if st.Capacity.Value() != tc.capacity || st.Allocated.Value() != tc.allocated {
					t.Errorf("capacity/allocated %s/%s, want %d/%d", st.Capacity, st.Allocated, tc.capacity, tc.allocated)
				}
			}
			if st.ObservedGeneration != 7 {
				t.Errorf("observedGeneration %d, want 7", st.ObservedGeneration)
			}
			for typ, want := range tc.conditions {
				c := meta.FindStatusCondition(st.Conditions, typ)
				if c == nil {
					t.Errorf("no %s condition", typ)
					continue
				}
				if c.Status != want.status || c.Reason != want.reason || !strings.Contains(c.Message, want.message) || c.ObservedGeneration != 7 {
					t.Errorf("%s = %s/%s %q (gen %d), want %s/%s containing %q", typ, c.Status, c.Reason, c.Message, c.ObservedGeneration, want.status, want.reason, want.message)
				}
			}
			if len(st.Servers) != len(tc.o.Readings) {
				t.Fatalf("%d server entries, want %d", len(st.Servers), len(tc.o.Readings))
			}
			for _, s := range st.Servers {
				frag, bad := tc.notReady[s.NodeName]
				if s.Ready == bad || !strings.Contains(s.Message, frag) {
					t.Errorf("server %s ready=%v message %q, want ready=%v with %q", s.NodeName, s.Ready, s.Message, !bad, frag)
				}
			}
		})
	}
}

func TestComputeStatusServerEntry(t *testing.T) {
	st := computeStatus(&rcv1.CachePoolStatus{}, &observation{Readings: []serverReading{readyReading("n1", "rack-a", 10*gib, 2*gib, 3)}})
	s := st.Servers[0]
	if s.NodeName != "n1" || s.Rack != "rack-a" || s.Address != "10.0.0.1" || s.Version == "" ||
		s.Capacity.Value() != 10*gib || s.Allocated.Value() != 2*gib || s.Volumes != 3 || s.IOPS != 42 || !s.Ready || s.Message != "" {
		t.Errorf("server entry %+v", s)
	}
}

func TestComputeStatusKeepsObservedGenerationOnFailure(t *testing.T) {
	old := &rcv1.CachePoolStatus{ObservedGeneration: 4}
	st := computeStatus(old, &observation{Generation: 5, Succeeded: false})
	if st.ObservedGeneration != 4 {
		t.Errorf("observedGeneration %d after a failed pass, want 4 (unchanged)", st.ObservedGeneration)
	}
}

func TestComputeStatusKeepsTransitionTimes(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	o := &observation{Readings: []serverReading{readyReading("n1", "a", gib, 0, 0)}, Succeeded: true, Now: t0}
	first := computeStatus(&rcv1.CachePoolStatus{}, o)
	o.Now = t0.Add(time.Hour)
	second := computeStatus(&first, o)
	if c := meta.FindStatusCondition(second.Conditions, rcv1.ConditionReady); !c.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Ready moved to %s without changing status", c.LastTransitionTime)
	}
	o.Readings[0].Server.PodReady = false
	third := computeStatus(&second, o)
	if c := meta.FindStatusCondition(third.Conditions, rcv1.ConditionReady); !c.LastTransitionTime.Time.Equal(t0.Add(time.Hour)) {
		t.Errorf("Ready changed status but kept transition time %s", c.LastTransitionTime)
	}
}

func TestRolloutMessage(t *testing.T) {
	ds := func(gen, observed int64, desired, updated int32) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{}
		d.Generation = gen
		d.Status = appsv1.DaemonSetStatus{ObservedGeneration: observed, DesiredNumberScheduled: desired, UpdatedNumberScheduled: updated}
		return d
	}
	cases := []struct {
		name string
		ds   *appsv1.DaemonSet
		want string
	}{
		{"not created", nil, "being created"},
		{"generation not seen", ds(2, 1, 3, 3), "generation 2"},
		{"updating", ds(2, 2, 3, 1), "1 of 3"},
		{"done", ds(2, 2, 3, 3), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := rolloutMessage(tc.ds)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("rolloutMessage = %q, want %q", got, tc.want)
			}
		})
	}
}

// A pass that cannot list the servers keeps the last known ones: an empty
// list would start every volume's lost-server grace.
func TestComputeStatusKeepsServersWhenListingFails(t *testing.T) {
	old := computeStatus(&rcv1.CachePoolStatus{}, &observation{Readings: []serverReading{readyReading("n1", "rack-a", 10*gib, 2*gib, 3)}})
	st := computeStatus(&old, &observation{ServersUnknown: true})
	if len(st.Servers) != 1 || st.Servers[0].NodeName != "n1" || !st.Servers[0].Ready {
		t.Fatalf("servers = %+v, want the last known n1 (ready)", st.Servers)
	}
	if st.ReadyServers != old.ReadyServers || st.TotalServers != old.TotalServers {
		t.Fatalf("ready/total = %d/%d, want %d/%d", st.ReadyServers, st.TotalServers, old.ReadyServers, old.TotalServers)
	}
}
