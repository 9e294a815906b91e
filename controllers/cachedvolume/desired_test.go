package cachedvolume

import (
	"reflect"
	"strings"
	"testing"

	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/ceph"
	"github.com/rackcache/rackcache/controllers/dataplane"
)

func i32(v int32) *int32 { return &v }

func testPool() *rcv1.CachePool {
	return &rcv1.CachePool{
		ObjectMeta: metav1.ObjectMeta{Name: "fast"},
		Spec: rcv1.CachePoolSpec{
			Devices:        []rcv1.CacheDevice{{Path: "/dev/nvme1n1"}, {Path: "/dev/nvme2n1"}},
			BlockSizesKiB:  []rcv1.BlockSizeKiB{32, 64, 128, 256},
			AllocationMode: rcv1.Adaptive,
			WriteMode:      rcv1.WriteThrough,
			Port:           4420,
			Policies: rcv1.CachePolicy{
				Admission: "nhit:2", Eviction: "lru2", WriteMissFill: rcv1.WriteMissFillSparse,
				Cleaning: &rcv1.Cleaning{Policy: rcv1.CleaningLazy, StalenessMs: i32(500)},
			},
		},
	}
}

func testVolume() *rcv1.CachedVolume {
	return &rcv1.CachedVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-0b6d7c1e", UID: "6f1d4c52-7f0a-4f62-8f6e-2a3b4c5d6e7f"},
		Spec: rcv1.CachedVolumeSpec{
			PoolName:     "fast",
			RBD:          rcv1.RBDImage{Pool: "rbd", Image: "csi-vol-0b6d7c1e"},
			Size:         resource.MustParse("100Gi"),
			CacheSize:    "25%",
			AllowedHosts: []string{"nqn.2014-08.org.nvmexpress:uuid:b", "nqn.2014-08.org.nvmexpress:uuid:a", "nqn.2014-08.org.nvmexpress:uuid:b"},
		},
	}
}

var testBackend = &ceph.Backend{Monitors: []string{"10.0.0.1:6789", "10.0.0.2:6789"}, UserID: "rackcache", Key: "AQD-secret-key=="}

func TestDesiredState(t *testing.T) {
	vol, pool := testVolume(), testPool()
	d := DesiredState(vol, pool, testBackend, "10.1.2.3", 25*gib)
	cluster := "ceph-fast-" + testBackend.Fingerprint()
	want := Desired{
		Volume:    "pvc-0b6d7c1e",
		Cluster:   dataplane.RbdCluster{Name: cluster, UserID: "rackcache", MonHost: "10.0.0.1:6789,10.0.0.2:6789"},
		Rbd:       dataplane.RbdBdev{Name: "rbd-pvc-0b6d7c1e", ClusterName: cluster, PoolName: "rbd", RbdName: "csi-vol-0b6d7c1e", BlockSize: 4096},
		SizeBytes: 100 * gib,
		Cached: dataplane.CachedBdevParams{
			Name: "cv-pvc-0b6d7c1e", CoreBdevName: "rbd-pvc-0b6d7c1e", CacheSizeMiB: 25 * 1024,
			WriteMode: "wt", Mode: "adaptive", BlockSizesKiB: []uint32{32, 64, 128, 256},
			WriteMissFill: "sparse", Admission: "nhit:2", Eviction: "lru2",
			Cleaning: &dataplane.Cleaning{Policy: "lazy", StalenessMs: 500},
		},
		CacheDevices: []string{"cache0", "cache1"},
		Subsystem: dataplane.SubsystemParams{
			NQN: "nqn.2025-01.io.rackcache:vol:pvc-0b6d7c1e", SerialNumber: SerialNumber(string(vol.UID)),
			ModelNumber: "rackcache cached volume", MaxNamespaces: 1, ANAReporting: true,
		},
		Namespace: dataplane.Namespace{NSID: 1, BdevName: "cv-pvc-0b6d7c1e", UUID: NamespaceUUID(string(vol.UID)), ANAGroup: 1},
		Listener:  dataplane.ListenAddress{TrType: "TCP", AdrFam: "IPv4", TrAddr: "10.1.2.3", TrSvcID: "4420"},
		Hosts:     []string{"nqn.2014-08.org.nvmexpress:uuid:a", "nqn.2014-08.org.nvmexpress:uuid:b"},
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("DesiredState:\n got %+v\nwant %+v", d, want)
	}
}

// TestDesiredPolicies: the volume's fields override the pool's one by one,
// and every API name maps to the dataplane's.
func TestDesiredPolicies(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*rcv1.CachedVolume, *rcv1.CachePool)
		check  func(dataplane.CachedBdevParams) bool
	}{
		{"pool defaults", func(*rcv1.CachedVolume, *rcv1.CachePool) {},
			func(p dataplane.CachedBdevParams) bool {
				return p.WriteMode == "wt" && p.Admission == "nhit:2" && p.Cleaning.Policy == "lazy"
			}},
		{"volume write mode WriteBack", func(v *rcv1.CachedVolume, _ *rcv1.CachePool) { v.Spec.WriteMode = rcv1.WriteBack },
			func(p dataplane.CachedBdevParams) bool { return p.WriteMode == "wb" }},
		{"pool WriteAround", func(_ *rcv1.CachedVolume, pl *rcv1.CachePool) { pl.Spec.WriteMode = rcv1.WriteAround },
			func(p dataplane.CachedBdevParams) bool { return p.WriteMode == "wa" }},
		{"volume PassThrough over pool WriteBack", func(v *rcv1.CachedVolume, pl *rcv1.CachePool) {
			pl.Spec.WriteMode, v.Spec.WriteMode = rcv1.WriteBack, rcv1.PassThrough
		}, func(p dataplane.CachedBdevParams) bool { return p.WriteMode == "pt" }},
		{"fixed allocation", func(v *rcv1.CachedVolume, pl *rcv1.CachePool) {
			v.Spec.AllocationMode, pl.Spec.BlockSizesKiB = rcv1.Fixed, []rcv1.BlockSizeKiB{64}
		}, func(p dataplane.CachedBdevParams) bool {
			return p.Mode == "fixed" && reflect.DeepEqual(p.BlockSizesKiB, []uint32{64})
		}},
		{"admission override keeps the pool's eviction", func(v *rcv1.CachedVolume, _ *rcv1.CachePool) { v.Spec.Policies.Admission = "tinylfu:strict" },
			func(p dataplane.CachedBdevParams) bool {
				return p.Admission == "tinylfu:strict" && p.Eviction == "lru2"
			}},
		{"pool fill size Locality", func(_ *rcv1.CachedVolume, pl *rcv1.CachePool) { pl.Spec.FillSize = rcv1.FillSizeLocality },
			func(p dataplane.CachedBdevParams) bool { return p.FillSize == "locality" }},
		{"a fixed volume leaves the pool's fill size out", func(v *rcv1.CachedVolume, pl *rcv1.CachePool) {
			pl.Spec.FillSize, v.Spec.AllocationMode, pl.Spec.BlockSizesKiB = rcv1.FillSizeLocality, rcv1.Fixed, []rcv1.BlockSizeKiB{4}
		}, func(p dataplane.CachedBdevParams) bool { return p.Mode == "fixed" && p.FillSize == "" }},
		{"write miss fill names", func(v *rcv1.CachedVolume, _ *rcv1.CachePool) {
			v.Spec.Policies.WriteMissFill = rcv1.WriteMissFillHeadTail
		},
			func(p dataplane.CachedBdevParams) bool { return p.WriteMissFill == "head-tail" }},
		{"whole-block", func(v *rcv1.CachedVolume, _ *rcv1.CachePool) {
			v.Spec.Policies.WriteMissFill = rcv1.WriteMissFillWholeBlock
		},
			func(p dataplane.CachedBdevParams) bool { return p.WriteMissFill == "whole-block" }},
		{"aggressive cleaning: percent to fraction", func(v *rcv1.CachedVolume, _ *rcv1.CachePool) {
			v.Spec.Policies.Cleaning = &rcv1.Cleaning{Policy: rcv1.CleaningAggressive, DirtyRatioPercent: i32(25), BatchBlocks: i32(16), WakeUpMs: i32(100)}
		}, func(p dataplane.CachedBdevParams) bool {
			return reflect.DeepEqual(p.Cleaning, &dataplane.Cleaning{Policy: "aggressive", DirtyRatio: 0.25, BatchBlocks: 16, WakeUpMs: 100})
		}},
		{"lazy cleaning fields", func(v *rcv1.CachedVolume, _ *rcv1.CachePool) {
			v.Spec.Policies.Cleaning = &rcv1.Cleaning{Policy: rcv1.CleaningLazy, StalenessMs: i32(1), MaxBatch: i32(2), ActivityThresholdMs: i32(3), WakeUpMs: i32(4)}
		}, func(p dataplane.CachedBdevParams) bool {
			return reflect.DeepEqual(p.Cleaning, &dataplane.Cleaning{Policy: "lazy", StalenessMs: 1, MaxBatch: 2, ActivityThresholdMs: 3, WakeUpMs: 4})
		}},
		{"sequential cutoff", func(v *rcv1.CachedVolume, _ *rcv1.CachePool) {
			v.Spec.Policies.SeqCutoff = &rcv1.SeqCutoff{Policy: rcv1.SeqCutoffFull, ThresholdKiB: i32(1024)}
		}, func(p dataplane.CachedBdevParams) bool {
			return reflect.DeepEqual(p.SeqCutoff, &dataplane.SeqCutoff{Policy: "full", ThresholdKiB: 1024})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vol, pool := testVolume(), testPool()
			c.mutate(vol, pool)
			p := DesiredState(vol, pool, testBackend, "10.1.2.3", gib).Cached
			if !c.check(p) {
				t.Errorf("cached bdev params %+v (cleaning %+v, seq cutoff %+v)", p, p.Cleaning, p.SeqCutoff)
			}
		})
	}
}

func TestDesiredListenerIPv6AndDefaultPort(t *testing.T) {
	pool := testPool()
	pool.Spec.Port = 0
	d := DesiredState(testVolume(), pool, testBackend, "fd00::7", gib)
	if d.Listener.AdrFam != "IPv6" || d.Listener.TrSvcID != "4420" {
		t.Errorf("listener %+v", d.Listener)
	}
}

func TestNames(t *testing.T) {
	if got := SubsystemNQN("pvc-1"); got != "nqn.2025-01.io.rackcache:vol:pvc-1" {
		t.Errorf("SubsystemNQN = %q", got)
	}
	long1 := strings.Repeat("a", 253)
	long2 := strings.Repeat("a", 252) + "b"
	n1, n2 := SubsystemNQN(long1), SubsystemNQN(long2)
	if len(n1) > 223 || len(n2) > 223 || !strings.HasPrefix(n1, NQNPrefix) {
		t.Errorf("long NQNs: %d and %d bytes: %q", len(n1), len(n2), n1)
	}
	if n1 == n2 {
		t.Errorf("two long names sharing a prefix got one NQN %q", n1)
	}
	if SubsystemNQN(long1) != n1 {
		t.Errorf("SubsystemNQN is not stable")
	}
	fits := strings.Repeat("c", 223-len(NQNPrefix))
	if SubsystemNQN(fits) != NQNPrefix+fits {
		t.Errorf("a name that fits exactly was shortened")
	}

	u := NamespaceUUID("6f1d4c52-7f0a-4f62-8f6e-2a3b4c5d6e7f")
	parsed, err := uuid.Parse(u)
	if err != nil || parsed.Version() != 5 {
		t.Errorf("NamespaceUUID %q: version %v, %v", u, parsed.Version(), err)
	}
	if NamespaceUUID("6f1d4c52-7f0a-4f62-8f6e-2a3b4c5d6e7f") != u || NamespaceUUID("other-uid") == u {
		t.Errorf("NamespaceUUID must be stable per UID and differ between UIDs")
	}
	if s := SerialNumber("uid"); len(s) != 20 || s != SerialNumber("uid") {
		t.Errorf("SerialNumber %q: want 20 stable characters", s)
	}
	if len(ModelNumber) > 40 {
		t.Errorf("model number longer than 40 bytes")
	}
}

func TestResolveCacheSize(t *testing.T) {
	cases := []struct {
		size, cache string
		want        int64
		err         bool
	}{
		{"100Gi", "25%", 25 * gib, false},
		{"100Gi", "", 10 * gib, false}, // the default, 10%
		{"100Gi", "10Gi", 10 * gib, false},
		{"10Mi", "1%", mib, false},             // 104857.6 bytes, rounded up to a MiB
		{"1000M", "10%", 96 * mib, false},      // 100 000 000 bytes = 95.37 MiB, up
		{"100Gi", "1500Mi", 1500 * mib, false}, // already whole MiB
		{"100Gi", "1G", 954 * mib, false},      // 1e9 bytes = 953.67 MiB, up
		{"100Gi", "100%", 100 * gib, false},    // the whole volume
		{"100Gi", "0%", 0, true},               // refused
		{"100Gi", "abc", 0, true},              // neither
		{"100Gi", "101%", 0, true},             // out of range
		{"4Ei", "50%", 2 << 60, false},         // big.Int keeps size x percent from overflowing
	}
	for _, c := range cases {
		spec := rcv1.CachedVolumeSpec{Size: resource.MustParse(c.size), CacheSize: rcv1.CacheSize(c.cache)}
		got, err := ResolveCacheSize(&spec)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ResolveCacheSize(size %s, cache %q) = %d, %v; want %d, error %v", c.size, c.cache, got, err, c.want, c.err)
		}
	}
}

// TestEffectiveWriteModeTakenAtCreation: the pool's write mode is taken
// when a volume is created; a later change of the pool's mode, or clearing
// the volume's own, keeps the mode the volume runs with.
func TestEffectiveWriteModeTakenAtCreation(t *testing.T) {
	pool := &rcv1.CachePool{Spec: rcv1.CachePoolSpec{WriteMode: rcv1.WriteThrough}}
	for _, tc := range []struct {
		name          string
		spec, running rcv1.WriteMode
		want          rcv1.WriteMode
	}{
		{"new volume takes the pool's", "", "", rcv1.WriteThrough},
		{"own mode wins", rcv1.WriteAround, rcv1.WriteBack, rcv1.WriteAround},
		{"pool changed later: keeps its mode", "", rcv1.WriteBack, rcv1.WriteBack},
	} {
		vol := &rcv1.CachedVolume{}
		vol.Spec.WriteMode, vol.Status.WriteMode = tc.spec, tc.running
		if got := EffectiveWriteMode(vol, pool); got != tc.want {
			t.Errorf("%s: EffectiveWriteMode = %s, want %s", tc.name, got, tc.want)
		}
	}
}
