package dashboard

import (
	"encoding/json"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

func quantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func TestBuildState(t *testing.T) {
	pool := rcv1.CachePool{ObjectMeta: metav1.ObjectMeta{Name: "fast"}}
	pool.Status = rcv1.CachePoolStatus{
		Conditions: []metav1.Condition{{Type: rcv1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: rcv1.ReasonServersNotReady, Message: "1 of 2 servers ready"}},
		ReadyServers: 1, TotalServers: 2, Capacity: quantity("8Gi"), Allocated: quantity("3Gi"), Volumes: 2,
		Servers: []rcv1.ServerStatus{
			{NodeName: "node-b", Ready: false, Message: "no answer"},
			{NodeName: "node-a", Rack: "r1", Address: "10.0.0.1", Ready: true, Capacity: quantity("4Gi"),
				Allocated: quantity("3Gi"), Volumes: 2, Devices: []rcv1.DeviceStatus{
					{Name: "cache0", Capacity: resource.MustParse("2Gi")},
					{Name: "cache1", Capacity: resource.MustParse("2Gi")},
				}},
		},
	}
	empty := rcv1.CachePool{ObjectMeta: metav1.ObjectMeta{Name: "a-new"}}

	v1 := cachedVolume("vol-2", "fast", "50.0%", "512", 10, 20)
	v1.Status.Server, v1.Status.CacheDevice, v1.Status.CacheSize = "node-a", "cache0", quantity("1Gi")
	v2 := cachedVolume("vol-1", "fast", "", "", 0, 0)
	v2.Status.Server, v2.Status.CacheDevice, v2.Status.CacheSize = "node-a", "cache0", quantity("1536Mi")
	v2.Status.Phase, v2.Status.WriteMode = rcv1.VolumeReady, rcv1.WriteMode("WriteBack")
	v2.Status.Conditions = []metav1.Condition{{Type: rcv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "AsExpected"}}
	// Same server and device name in another pool: not on fast's device.
	other := cachedVolume("vol-3", "other", "", "", 0, 0)
	other.Status.Server, other.Status.CacheDevice, other.Status.CacheSize = "node-a", "cache0", quantity("1Gi")

	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	s := buildState(now, Options{SamplePeriod: 10 * time.Second, HistorySize: 360}, []rcv1.CachePool{pool, empty},
		[]rcv1.CachedVolume{v1, v2, other}, nil, "forbidden", nil)

	if len(s.Pools) != 2 || s.Pools[0].Name != "a-new" || s.Pools[1].Name != "fast" {
		t.Fatalf("pools not sorted by name: %+v", s.Pools)
	}
	if p := s.Pools[0]; p.Ready != "Unknown" || p.Reason != "" || len(p.Servers) != 0 || p.CapacityBytes != 0 {
		t.Errorf("pool without status = %+v, want Ready Unknown and zero figures", p)
	}
	p := s.Pools[1]
	if p.Ready != "False" || p.Reason != rcv1.ReasonServersNotReady || p.Message != "1 of 2 servers ready" ||
		p.ReadyServers != 1 || p.TotalServers != 2 || p.CapacityBytes != 8<<30 || p.AllocatedBytes != 3<<30 || p.Volumes != 2 {
		t.Errorf("pool = %+v", p)
	}
	if len(p.Servers) != 2 || p.Servers[0].Node != "node-a" || p.Servers[1].Node != "node-b" {
		t.Fatalf("servers not sorted by node: %+v", p.Servers)
	}
	a := p.Servers[0]
	if !a.Ready || a.Rack != "r1" || a.Address != "10.0.0.1" || a.CapacityBytes != 4<<30 || a.AllocatedBytes != 3<<30 || a.Volumes != 2 {
		t.Errorf("server node-a = %+v", a)
	}
	wantDevices := []Device{
		{Name: "cache0", CapacityBytes: 2 << 30, UsedBytes: 2560 << 20, FreeBytes: 0}, // over-committed: free is 0, not negative
		{Name: "cache1", CapacityBytes: 2 << 30, UsedBytes: 0, FreeBytes: 2 << 30},
	}
	for i, want := range wantDevices {
		if a.Devices[i] != want {
			t.Errorf("device %d = %+v, want %+v", i, a.Devices[i], want)
		}
	}
	if b := p.Servers[1]; b.Ready || b.Message != "no answer" || len(b.Devices) != 0 {
		t.Errorf("server node-b = %+v", b)
	}

	wantVolumes := []Volume{
		{Name: "vol-1", Pool: "fast", Server: "node-a", Phase: "Ready", WriteMode: "WriteBack", Ready: "True", CacheSizeBytes: 1536 << 20},
		{Name: "vol-2", Pool: "fast", Server: "node-a", Ready: "Unknown", HitRatio: "50.0%", CacheSizeBytes: 1 << 30,
			DirtyBytes: 512, ReadBytes: 10, WrittenBytes: 20},
		{Name: "vol-3", Pool: "other", Server: "node-a", Ready: "Unknown", CacheSizeBytes: 1 << 30},
	}
	for i, want := range wantVolumes {
		if s.Volumes[i] != want {
			t.Errorf("volume %d = %+v, want %+v", i, s.Volumes[i], want)
		}
	}
	if s.EventsError != "forbidden" || s.SamplePeriodSeconds != 10 || s.HistorySize != 360 || !s.GeneratedAt.Equal(now) {
		t.Errorf("state header = %v %v %v %v", s.EventsError, s.SamplePeriodSeconds, s.HistorySize, s.GeneratedAt)
	}
	// The page iterates these: JSON must have lists, never null.
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"pools", "volumes", "events", "history"} {
		if string(raw[k]) == "null" {
			t.Errorf("%s is null in the JSON", k)
		}
	}
}
