package csi

import (
	"os"
	"path/filepath"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	"sigs.k8s.io/yaml"
)

// TestSampleStorageClasses: the StorageClasses of config/samples name this
// driver and carry parameters CreateVolume accepts.
func TestSampleStorageClasses(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "config", "samples", "csi_storageclass_*.yaml"))
	if len(files) < 2 {
		t.Fatalf("config/samples has %d StorageClasses, want the write-back and write-through ones", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var sc storagev1.StorageClass
		if err := yaml.UnmarshalStrict(b, &sc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if sc.Provisioner != DriverName {
			t.Errorf("%s: provisioner %q", f, sc.Provisioner)
		}
		if _, err := parseVolumeParams(sc.Parameters); err != nil {
			t.Errorf("%s: CreateVolume would refuse its parameters: %v", f, err)
		}
		if sc.VolumeBindingMode == nil || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
			t.Errorf("%s: volumeBindingMode is not WaitForFirstConsumer: volumes would not follow the pod's rack", f)
		}
	}
	b, err := os.ReadFile(filepath.Join("..", "config", "samples", "csi_volumesnapshotclass.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var vsc struct {
		Kind   string `json:"kind"`
		Driver string `json:"driver"`
	}
	if err := yaml.Unmarshal(b, &vsc); err != nil || vsc.Kind != "VolumeSnapshotClass" || vsc.Driver != DriverName {
		t.Errorf("csi_volumesnapshotclass.yaml: %+v, %v", vsc, err)
	}
}
