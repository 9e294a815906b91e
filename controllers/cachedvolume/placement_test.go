package cachedvolume

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

const gib = 1 << 30

func srv(name, rack string, freeGiB, iops int64) Candidate {
	return Candidate{Name: name, Rack: rack, Ready: true, Capacity: 100 * gib, Allocated: (100 - freeGiB) * gib, IOPS: iops}
}

func TestPlace(t *testing.T) {
	notReady := srv("n-down", "a", 100, 0)
	notReady.Ready = false
	cases := []struct {
		name      string
		servers   []Candidate
		req       PlacementRequest
		want      []string // any of these (sampling); one entry when deterministic
		crossRack bool
		noCap     string // substring of the refusal
	}{
		{
			name:    "in rack first even when another rack is idler",
			servers: []Candidate{srv("a1", "a", 10, 900), srv("b1", "b", 90, 0)},
			req:     PlacementRequest{Rack: "a", Need: 5 * gib, AllowCrossRack: true},
			want:    []string{"a1"},
		},
		{
			name:    "capacity: a rack server without room is skipped",
			servers: []Candidate{srv("a1", "a", 1, 0), srv("a2", "a", 20, 500)},
			req:     PlacementRequest{Rack: "a", Need: 5 * gib},
			want:    []string{"a2"},
		},
		{
			name:    "not ready servers are skipped",
			servers: []Candidate{notReady, srv("a2", "a", 20, 500)},
			req:     PlacementRequest{Rack: "a", Need: 5 * gib},
			want:    []string{"a2"},
		},
		{
			name:      "cross rack when the rack is full and the pool allows it",
			servers:   []Candidate{srv("a1", "a", 1, 0), srv("b1", "b", 50, 0)},
			req:       PlacementRequest{Rack: "a", Need: 5 * gib, AllowCrossRack: true},
			want:      []string{"b1"},
			crossRack: true,
		},
		{
			name:    "no cross rack when the pool forbids it",
			servers: []Candidate{srv("a1", "a", 1, 0), srv("b1", "b", 50, 0)},
			req:     PlacementRequest{Rack: "a", Need: 5 * gib, AllowCrossRack: false},
			noCap:   "no ready cache server in rack a has 5120 MiB of cache free (the pool does not allow",
		},
		{
			name:    "cross rack allowed but nothing anywhere",
			servers: []Candidate{srv("a1", "a", 1, 0), srv("b1", "b", 2, 0)},
			req:     PlacementRequest{Rack: "a", Need: 5 * gib, AllowCrossRack: true},
			noCap:   "in rack a or any other rack",
		},
		{
			name:    "a rack with no servers at all falls back when allowed",
			servers: []Candidate{srv("b1", "b", 50, 0)},
			req:     PlacementRequest{Rack: "z", Need: gib, AllowCrossRack: true},
			want:    []string{"b1"}, crossRack: true,
		},
		{
			name:    "no rack wanted: every server is a candidate, never cross-rack",
			servers: []Candidate{srv("a1", "a", 1, 0), srv("b1", "b", 50, 0)},
			req:     PlacementRequest{Need: 5 * gib},
			want:    []string{"b1"},
		},
		{
			name:  "no servers",
			req:   PlacementRequest{Need: gib},
			noCap: "no ready cache server has 1024 MiB of cache free",
		},
		{
			name:    "the lost server is excluded",
			servers: []Candidate{srv("a1", "a", 90, 0), srv("a2", "a", 10, 900)},
			req:     PlacementRequest{Rack: "a", Need: gib, Exclude: []string{"a1"}},
			want:    []string{"a2"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for seed := uint64(0); seed < 20; seed++ {
				got, err := Place(c.servers, c.req, rand.New(rand.NewPCG(seed, 1)))
				if c.noCap != "" {
					var nc *NoCapacityError
					if !errors.As(err, &nc) || !strings.Contains(err.Error(), c.noCap) {
						t.Fatalf("err = %v, want NoCapacityError containing %q", err, c.noCap)
					}
					return
				}
				if err != nil {
					t.Fatalf("Place: %v", err)
				}
				if got.Server.Name != c.want[0] || got.CrossRack != c.crossRack {
					t.Fatalf("seed %d: placed on %s crossRack %v, want %s crossRack %v", seed, got.Server.Name, got.CrossRack, c.want[0], c.crossRack)
				}
			}
		})
	}
}

// TestPlaceTwoChoices: the sampled pair's less loaded server wins, so the
// most loaded server is never chosen among three or more, and every other
// server is chosen for some draws (the sampling spreads volumes).
func TestPlaceTwoChoices(t *testing.T) {
	servers := []Candidate{srv("n1", "a", 50, 300), srv("n2", "a", 50, 100), srv("n3", "a", 50, 200), srv("n4", "a", 50, 400)}
	rng := rand.New(rand.NewPCG(42, 7))
	counts := map[string]int{}
	for range 400 {
		got, err := Place(servers, PlacementRequest{Rack: "a", Need: gib}, rng)
		if err != nil {
			t.Fatal(err)
		}
		counts[got.Server.Name]++
	}
	if counts["n4"] != 0 {
		t.Errorf("the most loaded server was chosen %d times", counts["n4"])
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if counts[n] == 0 {
			t.Errorf("server %s never chosen: %v", n, counts)
		}
	}
	// n2 (least loaded) wins every pair it is in: 3 of the 6 pairs.
	if counts["n2"] <= counts["n1"] || counts["n2"] <= counts["n3"] {
		t.Errorf("the least loaded server is not chosen most: %v", counts)
	}
}

func TestLessLoadedTies(t *testing.T) {
	a := Candidate{Name: "a", IOPS: 10, Allocated: 5}
	b := Candidate{Name: "b", IOPS: 10, Allocated: 3}
	c := Candidate{Name: "c", IOPS: 10, Allocated: 3}
	if !lessLoaded(b, a) || lessLoaded(a, b) {
		t.Errorf("equal IOPS: less allocated must win")
	}
	if !lessLoaded(b, c) || lessLoaded(c, b) {
		t.Errorf("equal IOPS and allocation: the name must decide")
	}
	// Same seed, same choice, whatever the listing order.
	s1 := []Candidate{srv("x", "", 50, 1), srv("y", "", 50, 1), srv("z", "", 50, 1)}
	s2 := []Candidate{s1[2], s1[0], s1[1]}
	for seed := uint64(0); seed < 10; seed++ {
		p1, _ := Place(s1, PlacementRequest{Need: 1}, rand.New(rand.NewPCG(seed, 3)))
		p2, _ := Place(s2, PlacementRequest{Need: 1}, rand.New(rand.NewPCG(seed, 3)))
		if p1.Server.Name != p2.Server.Name {
			t.Errorf("seed %d: %s vs %s depending on listing order", seed, p1.Server.Name, p2.Server.Name)
		}
	}
}

func TestLargestFree(t *testing.T) {
	dev := func(name string, g int64) rcv1.DeviceStatus {
		return rcv1.DeviceStatus{Name: name, Capacity: *resource.NewQuantity(g*gib, resource.BinarySI)}
	}
	two := []rcv1.DeviceStatus{dev("cache0", 10), dev("cache1", 10)}
	cases := []struct {
		name    string
		devices []rcv1.DeviceStatus
		placed  []placedCache
		want    int64
	}{
		{"empty server", two, nil, 10 * gib},
		{"volumes on known devices", two, []placedCache{{"cache0", 7 * gib}, {"cache1", 2 * gib}}, 8 * gib},
		// 20 GiB free in all, but no device has 12 GiB.
		{"free space split across devices", two, []placedCache{{"cache0", 4 * gib}, {"cache1", 4 * gib}}, 6 * gib},
		// Not applied yet: they go where the dataplane would put them,
		// the roomiest device, largest first (8 to cache0, 5 to cache1,
		// 3 to cache1).
		{"pending volumes fill the roomiest device", two, []placedCache{{"", 3 * gib}, {"", 8 * gib}, {"", 5 * gib}}, 2 * gib},
		{"a device name not in the list counts as pending", two, []placedCache{{"cache7", 9 * gib}}, 10 * gib},
		{"one device", []rcv1.DeviceStatus{dev("cache0", 4)}, []placedCache{{"cache0", 4 * gib}}, 0},
	}
	for _, tc := range cases {
		if got := largestFree(tc.devices, tc.placed); got != tc.want {
			t.Errorf("%s: largest free %d GiB, want %d GiB", tc.name, got/gib, tc.want/gib)
		}
	}
}

// A server with room in total but not on one device is no candidate.
func TestPlaceNeedsRoomOnOneDevice(t *testing.T) {
	split := srv("a1", "a", 20, 0)
	split.LargestFree, split.KnowsDevices = 6*gib, true
	whole := srv("a2", "a", 12, 900)
	whole.LargestFree, whole.KnowsDevices = 12*gib, true
	res, err := Place([]Candidate{split, whole}, PlacementRequest{Rack: "a", Need: 12 * gib}, rand.New(rand.NewPCG(1, 2)))
	if err != nil || res.Server.Name != "a2" {
		t.Fatalf("placed on %+v, %v; want a2 (a1 has 20 GiB free but 6 GiB on its roomiest device)", res.Server, err)
	}
	var noCap *NoCapacityError
	if _, err := Place([]Candidate{split}, PlacementRequest{Rack: "a", Need: 12 * gib}, rand.New(rand.NewPCG(1, 2))); !errors.As(err, &noCap) {
		t.Errorf("a server without room on one device: %v, want NoCapacityError", err)
	}
}
