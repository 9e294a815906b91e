package csi

import (
	"errors"
	"reflect"
	"testing"

	"github.com/rackcache/rackcache/controllers/cachedvolume"
)

// A re-placed volume is served elsewhere than its PV's volume context
// says: the publish context's portal wins, and the portal map applies to
// whichever is used.
func TestTargetPrefersThePublishContextsPortal(t *testing.T) {
	id := newVolumeID("fast", "rbd", "pvc-1")
	vc := map[string]string{ctxAddress: "10.0.0.1", ctxPort: "4420", ctxNSUUID: "3b241101-e2bb-4255-8caf-4136c566a962",
		ctxSubNQN: cachedvolume.SubsystemNQN(id.Image())}
	d := &Driver{node: NodeOptions{PortalMap: map[string]string{"10.0.0.2:4420": "127.0.0.1:14420"}}}

	got, err := d.targetOf(id, vc, nil)
	if err != nil || !reflect.DeepEqual(got.Portals, []Portal{{"10.0.0.1", "4420"}}) {
		t.Errorf("without a publish context: %+v, %v", got, err)
	}
	got, err = d.targetOf(id, vc, map[string]string{publishHostNQN: "nqn.x", ctxAddress: "10.0.0.2", ctxPort: "4420"})
	if err != nil || !reflect.DeepEqual(got.Portals, []Portal{{"127.0.0.1", "14420"}}) {
		t.Errorf("publish context through the portal map: %+v, %v", got, err)
	}
	// Every path, the owner's first, each through the portal map.
	got, err = d.targetOf(id, vc, map[string]string{publishHostNQN: "nqn.x", ctxAddress: "10.0.0.2", ctxPort: "4420",
		ctxPaths: "10.0.0.2:4420,[fd00::3]:4420"})
	if err != nil || !reflect.DeepEqual(got.Portals, []Portal{{"127.0.0.1", "14420"}, {"fd00::3", "4420"}}) {
		t.Errorf("publish context with paths: %+v, %v", got, err)
	}
	if _, err := d.targetOf(id, vc, map[string]string{ctxPaths: "10.0.0.2"}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a path without a port: %v", err)
	}
	if got.SubNQN != vc[ctxSubNQN] || got.NSUUID != vc[ctxNSUUID] {
		t.Errorf("subsystem and namespace come from the volume: %+v", got)
	}
	// A publish context with only the host NQN (an older controller)
	// leaves the volume context's portal.
	got, err = d.targetOf(id, vc, map[string]string{publishHostNQN: "nqn.x"})
	if err != nil || got.Portals[0].Address != "10.0.0.1" {
		t.Errorf("host-only publish context: %+v, %v", got, err)
	}
	if _, err := d.targetOf(id, map[string]string{}, map[string]string{ctxAddress: "10.0.0.2", ctxPort: "4420"}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a volume context without the namespace: %v", err)
	}
}
