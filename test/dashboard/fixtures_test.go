package dashboard

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// figure is a byte count the fixtures write and the text the page must
// show for it, written out by hand: the page's formatting is under test.
type figure struct {
	bytes int64
	text  string
}

// The figures of the fixtures. Each is distinct so that a value shown in
// the wrong cell cannot pass.
var (
	poolCapacity  = figure{12 << 30, "12.00 GiB"}
	poolAllocated = figure{5 << 30, "5.00 GiB"}
	serverACap    = figure{8 << 30, "8.00 GiB"}
	serverAAlloc  = figure{3 << 30, "3.00 GiB"}
	serverBCap    = figure{4 << 30, "4.00 GiB"}
	serverBAlloc  = figure{1 << 30, "1.00 GiB"}
	deviceCap     = figure{4 << 30, "4.00 GiB"}

	wbCacheSize = figure{3 << 30, "3.00 GiB"}
	wbDirty     = figure{768 << 20, "768.00 MiB"}
	wbRead      = figure{3221225472 + 512<<20, "3.50 GiB"}
	wbWritten   = figure{1610612736, "1.50 GiB"}
	wtCacheSize = figure{1 << 30, "1.00 GiB"}
	wtDirty     = figure{0, "0 B"}
	wtRead      = figure{123456789, "117.74 MiB"}
	wtWritten   = figure{512, "512 B"}
)

const (
	poolName = "pool-a"
	volWB    = "vol-wb"
	volWT    = "vol-wt"
	// hostileMessage must reach the page as text, not as markup.
	hostileMessage = `flush to Ceph failed: <script>document.title="pwned"</script><img src=x onerror=alert(1)>`
)

func quantity(b int64) *resource.Quantity { return resource.NewQuantity(b, resource.BinarySI) }

func readyCondition(status metav1.ConditionStatus, reason string) []metav1.Condition {
	return []metav1.Condition{{Type: rcv1.ConditionReady, Status: status, Reason: reason,
		Message: "set by the dashboard test", LastTransitionTime: metav1.Now()}}
}

// createPool creates pool-a with two servers: node-a (ready, two devices)
// and node-b (not ready, one device).
func createPool(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	pool := &rcv1.CachePool{
		ObjectMeta: metav1.ObjectMeta{Name: poolName},
		Spec: rcv1.CachePoolSpec{
			NodeSelector: map[string]string{"rackcache.io/cache-server": "true"},
			Devices:      []rcv1.CacheDevice{{Path: "/dev/nvme1n1"}, {Path: "/dev/nvme2n1"}},
			Ceph: rcv1.CephBackend{
				Monitors:  []string{"10.0.0.1:6789"},
				SecretRef: &rcv1.SecretReference{Name: "ceph-user", Namespace: "default"},
			},
			Image: "ghcr.io/rackcache/dataplane:test",
		},
	}
	if err := c.Create(ctx, pool); err != nil {
		t.Fatalf("create CachePool: %v", err)
	}
	pool.Status = rcv1.CachePoolStatus{
		Conditions:   readyCondition(metav1.ConditionTrue, rcv1.ReasonAsExpected),
		ReadyServers: 1,
		TotalServers: 2,
		Capacity:     quantity(poolCapacity.bytes),
		Allocated:    quantity(poolAllocated.bytes),
		Volumes:      2,
		Servers: []rcv1.ServerStatus{
			{NodeName: "node-a", Rack: "rack-1", Address: "10.0.0.11", Ready: true,
				Capacity: quantity(serverACap.bytes), Allocated: quantity(serverAAlloc.bytes), Volumes: 1,
				Devices: []rcv1.DeviceStatus{{Name: "cache0", Capacity: *quantity(deviceCap.bytes)}, {Name: "cache1", Capacity: *quantity(deviceCap.bytes)}}},
			{NodeName: "node-b", Rack: "rack-2", Address: "10.0.0.12", Ready: false, Message: "no answer on 10.0.0.12:5260",
				Capacity: quantity(serverBCap.bytes), Allocated: quantity(serverBAlloc.bytes), Volumes: 1,
				Devices: []rcv1.DeviceStatus{{Name: "cache0", Capacity: *quantity(deviceCap.bytes)}}},
		},
	}
	if err := c.Status().Update(ctx, pool); err != nil {
		t.Fatalf("set CachePool status: %v", err)
	}
}

// createVolumes creates a ready write-back volume on node-a's cache0 and
// a degraded write-through one on node-b's cache0.
func createVolumes(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	for _, v := range []struct {
		name, server, hitRatio string
		mode                   rcv1.WriteMode
		phase                  rcv1.CachedVolumePhase
		ready                  metav1.ConditionStatus
		cache, dirty, rd, wr   figure
	}{
		{volWB, "node-a", "93.5%", rcv1.WriteMode("WriteBack"), rcv1.VolumeReady, metav1.ConditionTrue, wbCacheSize, wbDirty, wbRead, wbWritten},
		{volWT, "node-b", "41.2%", rcv1.WriteMode("WriteThrough"), rcv1.VolumeDegraded, metav1.ConditionFalse, wtCacheSize, wtDirty, wtRead, wtWritten},
	} {
		vol := &rcv1.CachedVolume{
			ObjectMeta: metav1.ObjectMeta{Name: v.name},
			Spec: rcv1.CachedVolumeSpec{
				PoolName: poolName,
				RBD:      rcv1.RBDImage{Pool: "rbd", Image: v.name},
				Size:     resource.MustParse("100Gi"),
			},
		}
		if err := c.Create(ctx, vol); err != nil {
			t.Fatalf("create CachedVolume %s: %v", v.name, err)
		}
		reason := rcv1.ReasonAsExpected
		if v.ready != metav1.ConditionTrue {
			reason = "ServerLost"
		}
		vol.Status = rcv1.CachedVolumeStatus{
			Conditions:  readyCondition(v.ready, reason),
			Phase:       v.phase,
			Server:      v.server,
			CacheDevice: "cache0",
			CacheSize:   quantity(v.cache.bytes),
			WriteMode:   v.mode,
			Stats:       rcv1.VolumeStats{HitRatio: v.hitRatio, ReadBytes: v.rd.bytes, WrittenBytes: v.wr.bytes},
		}
		if v.dirty.bytes > 0 {
			vol.Status.Stats.Dirty = quantity(v.dirty.bytes)
		}
		if err := c.Status().Update(ctx, vol); err != nil {
			t.Fatalf("set CachedVolume %s status: %v", v.name, err)
		}
	}
}

// testEvent is an Event the test creates and the order the page must
// list it in (newest first).
type testEvent struct {
	kind, name, typ, reason, message string
	at                               time.Time
	count                            int32
}

// wantEvents are the Events about our objects, newest first.
func wantEvents(t0 time.Time) []testEvent {
	return []testEvent{
		{"CachedVolume", volWT, corev1.EventTypeWarning, "FlushFailed", hostileMessage, t0.Add(2 * time.Minute), 4},
		{"CachedVolume", volWB, corev1.EventTypeNormal, "Placed", "placed on node-a (rack-1), cache0", t0.Add(time.Minute), 1},
		{"CachePool", poolName, corev1.EventTypeNormal, "ServerReady", "cache server on node node-a is ready (10.0.0.11)", t0, 2},
	}
}

// createEvents creates the Events where a recorder puts those of
// cluster-scoped objects ("default"), in an order unlike the page's, and
// a newer one about a Pod that the page must leave out.
func createEvents(ctx context.Context, t *testing.T, c client.Client, t0 time.Time) {
	t.Helper()
	want := wantEvents(t0)
	all := []testEvent{want[2], want[0], want[1],
		{"Pod", "unrelated", corev1.EventTypeNormal, "Pulled", "not about rackcache", t0.Add(3 * time.Minute), 1}}
	for _, e := range all {
		apiVersion := rcv1.GroupVersion.String()
		if e.kind == "Pod" {
			apiVersion = "v1"
		}
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: "dashboard-test-", Namespace: metav1.NamespaceDefault},
			InvolvedObject: corev1.ObjectReference{APIVersion: apiVersion, Kind: e.kind, Name: e.name},
			Type:           e.typ,
			Reason:         e.reason,
			Message:        e.message,
			FirstTimestamp: metav1.NewTime(e.at),
			LastTimestamp:  metav1.NewTime(e.at),
			Count:          e.count,
			Source:         corev1.EventSource{Component: "dashboard-test"},
		}
		if err := c.Create(ctx, ev); err != nil {
			t.Fatalf("create Event %s: %v", e.reason, err)
		}
	}
}

// holdLease makes another replica the leader for as long as the test
// runs, so the manager under test stays a follower: the dashboard must
// work there too.
func holdLease(ctx context.Context, t *testing.T, c client.Client, name string) {
	t.Helper()
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("another-replica"),
			LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime:          &metav1.MicroTime{Time: time.Now()},
			RenewTime:            &metav1.MicroTime{Time: time.Now()},
		},
	}
	if err := c.Create(ctx, lease); err != nil {
		t.Fatalf("create the other replica's Lease: %v", err)
	}
}
