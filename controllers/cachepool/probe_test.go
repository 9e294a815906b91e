package cachepool

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dataplane"
)

func TestDeviceCapacities(t *testing.T) {
	gi := int64(1 << 30)
	limit := resource.MustParse("2Gi")
	spec := []rcv1.CacheDevice{{Path: "/dev/a"}, {Path: "/dev/b", Size: &limit}}
	bdev := func(name string, bytes int64) dataplane.Bdev {
		return dataplane.Bdev{Name: name, BlockSize: 4096, NumBlocks: uint64(bytes / 4096)}
	}
	cases := []struct {
		name        string
		devices     []dataplane.CacheDevice
		bdevs       []dataplane.Bdev
		want        []int64
		wantMissing []string
	}{
		{"bdev sizes before any volume", nil, []dataplane.Bdev{bdev("cache0", 10*gi), bdev("cache1", 1*gi)}, []int64{10 * gi, gi}, nil},
		{"capped by the spec size", nil, []dataplane.Bdev{bdev("cache0", 10*gi), bdev("cache1", 5*gi)}, []int64{10 * gi, 2 * gi}, nil},
		{"formatted device reports its room", []dataplane.CacheDevice{{CacheBdevName: "cache0", TotalMiB: 9000}},
			[]dataplane.Bdev{bdev("cache0", 10*gi), bdev("cache1", 1*gi)}, []int64{9000 << 20, gi}, nil},
		{"a missing device", nil, []dataplane.Bdev{bdev("cache1", 1*gi), bdev("other", 50*gi)}, []int64{gi}, []string{"cache0"}},
		{"nothing there", nil, nil, nil, []string{"cache0", "cache1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			devs, missing := deviceCapacities(spec, tc.devices, tc.bdevs)
			var got []int64
			for _, d := range devs {
				got = append(got, d.Capacity.Value())
			}
			if !slices.Equal(got, tc.want) || !slices.Equal(missing, tc.wantMissing) {
				t.Errorf("capacities %v missing %v, want %v %v (%+v)", got, missing, tc.want, tc.wantMissing, devs)
			}
		})
	}
}

func TestAllocatedBytes(t *testing.T) {
	devs := []dataplane.CacheDevice{
		{CacheBdevName: "cache0", Volumes: []dataplane.CacheVolume{{Name: "a", CacheSizeMiB: 100}, {Name: "b", CacheSizeMiB: 28}}},
		{CacheBdevName: "cache1", Volumes: []dataplane.CacheVolume{{Name: "c", CacheSizeMiB: 1}}},
	}
	if got := allocatedBytes(devs); got != 129<<20 {
		t.Errorf("allocated %d, want %d", got, 129<<20)
	}
}

func TestIOPS(t *testing.T) {
	stats := &dataplane.IOStats{TickRate: 1e9, Ticks: 5e9, Bdevs: []dataplane.BdevIOStat{
		{Name: "vol-a", NumReadOps: 100, NumWriteOps: 50},
		{Name: "rbd-a", NumReadOps: 1000, NumWriteOps: 1000}, // under vol-a: not counted again
	}}
	sample := cachedBdevOps(stats, []dataplane.CachedBdev{{Name: "vol-a"}})
	if sample.Ops != 150 {
		t.Errorf("ops %d, want 150 (cached bdevs only)", sample.Ops)
	}
	cases := []struct {
		name      string
		prev, cur ioSample
		want      int64
	}{
		{"steady", ioSample{Ops: 100, Ticks: 1e9, TickRate: 1e9}, ioSample{Ops: 1100, Ticks: 3e9, TickRate: 1e9}, 500},
		{"idle", ioSample{Ops: 100, Ticks: 1e9, TickRate: 1e9}, ioSample{Ops: 100, Ticks: 3e9, TickRate: 1e9}, 0},
		{"restarted dataplane", ioSample{Ops: 5000, Ticks: 9e9, TickRate: 1e9}, ioSample{Ops: 10, Ticks: 1e9, TickRate: 1e9}, 0},
		{"no time passed", ioSample{Ops: 1, Ticks: 1e9, TickRate: 1e9}, ioSample{Ops: 2, Ticks: 1e9, TickRate: 1e9}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := opsPerSecond(tc.prev, tc.cur); got != tc.want {
				t.Errorf("opsPerSecond = %d, want %d", got, tc.want)
			}
		})
	}
	var tr ioTracker
	if got := tr.rate("p", "n1", ioSample{Ops: 10, Ticks: 1e9, TickRate: 1e9}); got != 0 {
		t.Errorf("first sample rate %d, want 0", got)
	}
	if got := tr.rate("p", "n1", ioSample{Ops: 30, Ticks: 2e9, TickRate: 1e9}); got != 20 {
		t.Errorf("second sample rate %d, want 20", got)
	}
	tr.forget("p")
	if got := tr.rate("p", "n1", ioSample{Ops: 60, Ticks: 3e9, TickRate: 1e9}); got != 0 {
		t.Errorf("rate after forget %d, want 0 (no previous sample)", got)
	}
}
