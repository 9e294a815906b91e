package csi

import (
	"context"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/cachedvolume"
)

func TestPlanPaths(t *testing.T) {
	a, b, c := Portal{"10.0.0.1", "4420"}, Portal{"10.0.0.2", "4420"}, Portal{"10.0.0.3", "4420"}
	for name, tc := range map[string]struct {
		have []HostPath
		want []Portal
		plan pathChange
	}{
		"nothing to do": {
			have: []HostPath{{"nvme0", a, true}, {"nvme1", b, true}}, want: []Portal{a, b},
		},
		"a new mirror gets a path": {
			have: []HostPath{{"nvme0", a, true}}, want: []Portal{a, c},
			plan: pathChange{add: []Portal{c}},
		},
		"a server the volume left loses its path": {
			have: []HostPath{{"nvme0", a, false}, {"nvme1", b, true}}, want: []Portal{b},
			plan: pathChange{remove: []string{"nvme0"}},
		},
		"a promotion and a new mirror at once": {
			have: []HostPath{{"nvme0", a, false}, {"nvme1", b, true}}, want: []Portal{b, c},
			plan: pathChange{add: []Portal{c}, remove: []string{"nvme0"}},
		},
		// The kernel reconnects a listed path itself.
		"a listed path that is not live stays": {
			have: []HostPath{{"nvme0", a, false}, {"nvme1", b, true}}, want: []Portal{a, b},
		},
		// Nothing is taken away until a listed path carries I/O.
		"no listed path live: only additions": {
			have: []HostPath{{"nvme0", a, true}}, want: []Portal{b},
			plan: pathChange{add: []Portal{b}},
		},
		"listed paths connecting: unlisted live one stays": {
			have: []HostPath{{"nvme0", a, true}, {"nvme1", b, false}}, want: []Portal{b},
		},
	} {
		if got := planPaths(tc.have, tc.want); !reflect.DeepEqual(got, tc.plan) {
			t.Errorf("%s: plan %+v, want %+v", name, got, tc.plan)
		}
	}
}

// recordingPaths is the kernel's side of following, for the pass's logic.
type recordingPaths struct {
	attached map[string][]HostPath
	added    map[string][]Portal
	removed  []string
}

func (r *recordingPaths) Attached(context.Context) (map[string][]HostPath, error) {
	return r.attached, nil
}

func (r *recordingPaths) AddPaths(_ context.Context, nqn string, p []Portal, _ ConnectDefaults) (int, error) {
	if r.added == nil {
		r.added = map[string][]Portal{}
	}
	r.added[nqn] = append(r.added[nqn], p...)
	return len(p), nil
}

func (r *recordingPaths) RemovePath(_ context.Context, nqn, name string) error {
	r.removed = append(r.removed, nqn+"/"+name)
	return nil
}

// A pass follows each attached rackcache subsystem's CachedVolume, through
// the portal map, and leaves alone other subsystems, volumes without
// paths, deleted ones, and a subsystem being staged.
func TestSyncPathsFollowsStatus(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := rcv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	vol := func(name string, paths ...rcv1.VolumePath) *rcv1.CachedVolume {
		cv := &rcv1.CachedVolume{ObjectMeta: metav1.ObjectMeta{Name: name}}
		cv.Status.NQN = cachedvolume.SubsystemNQN(name)
		cv.Status.Paths = paths
		return cv
	}
	owner := rcv1.VolumePath{Server: "s1", Role: rcv1.RoleOwner, Address: "10.1.0.1", Port: 4420}
	mirror := rcv1.VolumePath{Server: "s2", Role: rcv1.RoleMirror, Address: "10.1.0.2", Port: 4420}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		vol("grows", owner, mirror),
		vol("shrinks", mirror),
		vol("placing"),
		vol("staging", owner, mirror),
	).Build()
	// This node reaches s2 through a forward.
	d := &Driver{locks: newVolumeLocks(), node: NodeOptions{PortalMap: map[string]string{"10.1.0.2:4420": "127.0.0.9:5000"}}}
	s1, s2 := Portal{"10.1.0.1", "4420"}, Portal{"127.0.0.9", "5000"}
	nqn := cachedvolume.SubsystemNQN
	k := &recordingPaths{attached: map[string][]HostPath{
		nqn("grows"):   {{"nvme0", s1, true}},
		nqn("shrinks"): {{"nvme1", s1, false}, {"nvme2", s2, true}},
		nqn("placing"): {{"nvme3", s1, true}},
		nqn("staging"): {{"nvme4", s1, true}},
		nqn("gone"):    {{"nvme5", s1, true}},
		"nqn.other":    {{"nvme6", s1, true}},
	}}
	unlock, err := d.locks.lock(pathsLock(nqn("staging")))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if err := d.SyncPaths(context.Background(), PathFollower{Volumes: reader, NVMe: k}); err != nil {
		t.Fatal(err)
	}
	if want := map[string][]Portal{nqn("grows"): {s2}}; !reflect.DeepEqual(k.added, want) {
		t.Errorf("added %v, want %v", k.added, want)
	}
	if want := []string{nqn("shrinks") + "/nvme1"}; !reflect.DeepEqual(k.removed, want) {
		t.Errorf("removed %v, want %v", k.removed, want)
	}
}

// A stage connects to the paths the volume has now, not the ones it had
// at publish; without the volume (or its paths) the publish context's.
func TestStageUsesTheVolumesCurrentPaths(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := rcv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	promoted := &rcv1.CachedVolume{ObjectMeta: metav1.ObjectMeta{Name: volumeID{UUID: "promoted"}.Image()}}
	promoted.Status.NQN = cachedvolume.SubsystemNQN(promoted.Name)
	promoted.Status.Paths = []rcv1.VolumePath{
		{Server: "s2", Role: rcv1.RoleOwner, Address: "10.1.0.2", Port: 4420},
		{Server: "s3", Role: rcv1.RoleMirror, Address: "10.1.0.3", Port: 4420},
	}
	placing := &rcv1.CachedVolume{ObjectMeta: metav1.ObjectMeta{Name: volumeID{UUID: "placing"}.Image()}}
	placing.Status.NQN = cachedvolume.SubsystemNQN(placing.Name)
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(promoted, placing).Build()
	d := &Driver{locks: newVolumeLocks(), node: NodeOptions{Volumes: reader}}
	published := []Portal{{"10.1.0.1", "4420"}, {"10.1.0.2", "4420"}}
	for uuid, want := range map[string][]Portal{
		"promoted": {{"10.1.0.2", "4420"}, {"10.1.0.3", "4420"}},
		"placing":  published,
		"unknown":  published,
	} {
		id := volumeID{CachePool: "pool", RBDPool: "rbd", UUID: uuid}
		got := d.currentPortals(context.Background(), id, target{SubNQN: cachedvolume.SubsystemNQN(id.Image()), Portals: published})
		if !reflect.DeepEqual(got.Portals, want) {
			t.Errorf("%s: portals %v, want %v", uuid, got.Portals, want)
		}
	}
}
