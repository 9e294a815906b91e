package csi

import (
	"errors"
	"reflect"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

func TestParseVolumeParams(t *testing.T) {
	p, err := parseVolumeParams(map[string]string{
		"cachePool": "rack-cache", "pool": "rbd", "cacheSize": "25%", "writeMode": "WriteBack",
		"allocationMode": "Fixed", "imageFeatures": "layering, exclusive-lock,layering",
		"ctrlLossTmo": "-1", "nrIOQueues": "4",
		"policies":                         `{"admission":"always"}`,
		"csi.storage.k8s.io/fstype":        "xfs",
		"csi.storage.k8s.io/pvc/name":      "data",
		"csi.storage.k8s.io/pvc/namespace": "app",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := volumeParams{
		CachePool: "rack-cache", RBDPool: "rbd", CacheSize: "25%", WriteMode: rcv1.WriteBack,
		AllocationMode: rcv1.Fixed, Policies: rcv1.CachePolicy{Admission: "always"},
		ImageFeatures: []string{"layering", "exclusive-lock"},
		Connect:       map[string]string{"ctrlLossTmo": "-1", "nrIOQueues": "4"},
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("got %+v\nwant %+v", p, want)
	}
}

func TestParseVolumeParamsRefusesBadInput(t *testing.T) {
	base := func() map[string]string { return map[string]string{"cachePool": "c", "pool": "rbd"} }
	for name, change := range map[string]func(map[string]string){
		"no cache pool":        func(m map[string]string) { delete(m, "cachePool") },
		"no rbd pool":          func(m map[string]string) { delete(m, "pool") },
		"unknown key":          func(m map[string]string) { m["cachesize"] = "10%" },
		"percent too large":    func(m map[string]string) { m["cacheSize"] = "101%" },
		"percent zero":         func(m map[string]string) { m["cacheSize"] = "0%" },
		"size not a quantity":  func(m map[string]string) { m["cacheSize"] = "lots" },
		"size zero":            func(m map[string]string) { m["cacheSize"] = "0" },
		"write mode":           func(m map[string]string) { m["writeMode"] = "writeback" },
		"allocation mode":      func(m map[string]string) { m["allocationMode"] = "Dynamic" },
		"policies not JSON":    func(m map[string]string) { m["policies"] = "admission=always" },
		"policies unknown key": func(m map[string]string) { m["policies"] = `{"admision":"always"}` },
		"unknown feature":      func(m map[string]string) { m["imageFeatures"] = "layering,journaling" },
		"no layering":          func(m map[string]string) { m["imageFeatures"] = "exclusive-lock" },
		"negative keep-alive":  func(m map[string]string) { m["keepAliveTmo"] = "-1" },
		"ctrl loss not number": func(m map[string]string) { m["ctrlLossTmo"] = "ten" },
	} {
		m := base()
		change(m)
		if _, err := parseVolumeParams(m); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", name, err)
		}
	}
}

func TestConnectOptions(t *testing.T) {
	got, err := connectOptions(map[string]string{"keepAliveTmo": "15", "address": "x"}, DefaultConnect)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConnect
	want.KeepAliveTmo = 15
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := connectOptions(map[string]string{"nrIOQueues": "x"}, DefaultConnect); err == nil {
		t.Error("a bad option in the volume context passed")
	}
}

func TestRequestedSize(t *testing.T) {
	for _, c := range []struct {
		req, limit, want int64
		err              error
	}{
		{0, 0, 1 << 30, nil},
		{1, 0, 1 << 20, nil},
		{1<<20 + 1, 0, 2 << 20, nil},
		{0, 100 << 20, 100 << 20, nil},
		{10 << 20, 10 << 20, 10 << 20, nil},
		{5, 10, 0, ErrOutOfRange},
		{20, 10, 0, ErrInvalidArgument},
		{-1, 0, 0, ErrInvalidArgument},
	} {
		got, err := requestedSize(&csi.CapacityRange{RequiredBytes: c.req, LimitBytes: c.limit})
		if !errors.Is(err, c.err) || (c.err == nil && got != c.want) {
			t.Errorf("requestedSize(%d, %d) = %d, %v; want %d, %v", c.req, c.limit, got, err, c.want, c.err)
		}
	}
}

func TestPaginate(t *testing.T) {
	all := []int{0, 1, 2, 3, 4}
	page, next, err := paginate(all, "", 2)
	if err != nil || !reflect.DeepEqual(page, []int{0, 1}) || next != "2" {
		t.Fatalf("first page %v %q %v", page, next, err)
	}
	page, next, err = paginate(all, next, 10)
	if err != nil || !reflect.DeepEqual(page, []int{2, 3, 4}) || next != "" {
		t.Fatalf("last page %v %q %v", page, next, err)
	}
	for _, tok := range []string{"x", "-1", "6"} {
		if _, _, err := paginate(all, tok, 0); !errors.Is(err, ErrBusy) {
			t.Errorf("token %q: %v, want ErrBusy (Aborted)", tok, err)
		}
	}
}

func TestValidateCapabilities(t *testing.T) {
	mount := func(fs string, mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
		return &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fs}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		}
	}
	if err := validateCapabilities([]*csi.VolumeCapability{mount("xfs", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}); err != nil {
		t.Errorf("xfs single-node writer refused: %v", err)
	}
	for name, caps := range map[string][]*csi.VolumeCapability{
		"none":              nil,
		"multi-node writer": {mount("ext4", csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)},
		"btrfs":             {mount("btrfs", csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)},
		"no access type":    {{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}},
	} {
		if err := validateCapabilities(caps); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}
