package cachepool

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/rackcache/rackcache/controllers/servers"
)

func TestRenderDataplaneConfig(t *testing.T) {
	pool := testPool("cfg")
	got, err := renderDataplaneConfig(pool)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(got, &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, got)
	}
	want := map[string]any{"subsystems": []any{map[string]any{
		"subsystem": "bdev",
		"config": []any{
			map[string]any{"method": "bdev_aio_create", "params": map[string]any{"name": "cache0", "filename": "/dev/nvme1n1", "block_size": 4096.0}},
			map[string]any{"method": "bdev_aio_create", "params": map[string]any{"name": "cache1", "filename": "/dev/disk/by-id/nvme-b", "block_size": 4096.0}},
		},
	}}}
	if !equality.Semantic.DeepEqual(doc, want) {
		t.Errorf("config\n got %v\nwant %v", doc, want)
	}
}

func TestConfigHashFollowsDevices(t *testing.T) {
	a, _ := renderDataplaneConfig(testPool("p"))
	same, _ := renderDataplaneConfig(testPool("p"))
	changed := testPool("p")
	changed.Spec.Devices[0].Path = "/dev/nvme2n1"
	b, _ := renderDataplaneConfig(changed)
	if configHash(a) != configHash(same) {
		t.Error("the same devices hash differently")
	}
	if configHash(a) == configHash(b) {
		t.Error("a device change keeps the hash: the pods would not roll")
	}
}

func TestDesiredConfigMap(t *testing.T) {
	pool := testPool("cm")
	cm := desiredConfigMap(pool, "rackcache-system", []byte("{}"))
	if *cm.Name != servers.ConfigMapName("cm") || *cm.Namespace != "rackcache-system" {
		t.Errorf("name %s/%s", *cm.Namespace, *cm.Name)
	}
	if cm.Data[ConfigKey] != "{}" {
		t.Errorf("data %v, want key %s", cm.Data, ConfigKey)
	}
	if !equality.Semantic.DeepEqual(cm.Labels, servers.Labels("cm")) {
		t.Errorf("labels %v", cm.Labels)
	}
	if len(cm.OwnerReferences) != 1 || *cm.OwnerReferences[0].UID != pool.UID || !*cm.OwnerReferences[0].Controller {
		t.Errorf("owner references %+v, want the pool as controller", cm.OwnerReferences)
	}
}
