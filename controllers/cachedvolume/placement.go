package cachedvolume

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// Candidate is one cache server as placement sees it.
type Candidate struct {
	// Name is the server's node name.
	Name string
	Rack string
	// Ready: the server answers and its cache devices are healthy.
	Ready bool
	// Capacity and Allocated are cache bytes; Allocated counts the volumes
	// placed there (the CachedVolumes' status, fresher than the pool's).
	Capacity  int64
	Allocated int64
	// LargestFree is the room on the cache device with the most of it (a
	// volume's cache lives on one device); it counts when KnowsDevices (a
	// server that reports no devices is judged by Free alone).
	LargestFree  int64
	KnowsDevices bool
	// IOPS is the server's recent load.
	IOPS int64
}

// Free is the cache capacity not given to volumes.
func (c Candidate) Free() int64 { return c.Capacity - c.Allocated }

// PlacementRequest is what a volume asks of placement.
type PlacementRequest struct {
	// Rack is the wanted rack ("" for none).
	Rack string
	// Need is the volume's cache size in bytes.
	Need int64
	// AllowCrossRack lets a volume whose rack has no room go elsewhere.
	AllowCrossRack bool
	// Exclude names servers not to use (the one a volume was lost on, the
	// owner when placing its mirror).
	Exclude []string
}

// PlacementResult is placement's choice.
type PlacementResult struct {
	Server Candidate
	// CrossRack: a rack was wanted and the server is in another one.
	CrossRack bool
}

// NoCapacityError says no server allowed by the rack rules has room.
type NoCapacityError struct {
	Rack           string
	Need           int64
	AllowCrossRack bool
}

func (e *NoCapacityError) Error() string {
	need := fmt.Sprintf("%d MiB of cache", e.Need/mib)
	switch {
	case e.Rack == "":
		return "no ready cache server has " + need + " free"
	case e.AllowCrossRack:
		return fmt.Sprintf("no ready cache server in rack %s or any other rack has %s free", e.Rack, need)
	default:
		return fmt.Sprintf("no ready cache server in rack %s has %s free (the pool does not allow cross-rack placement)", e.Rack, need)
	}
}

// Place picks a server for a volume: ready servers with room, those in the
// wanted rack first (the NVMe/TCP hop stays under the rack switch), other
// racks only when the wanted one has no candidate and the pool allows it;
// among the candidates the power of two choices: two sampled at random,
// the less loaded taken. Sampling two instead of taking the global minimum
// keeps many volumes placed on stale load figures from piling onto one
// server. rng makes the sampling reproducible in tests.
func Place(servers []Candidate, req PlacementRequest, rng *rand.Rand) (PlacementResult, error) {
	fits := func(c Candidate) bool {
		return c.Ready && !slices.Contains(req.Exclude, c.Name) && c.Free() >= req.Need && (!c.KnowsDevices || c.LargestFree >= req.Need)
	}
	var inRack, elsewhere []Candidate
	for _, c := range servers {
		if !fits(c) {
			continue
		}
		if req.Rack == "" || c.Rack == req.Rack {
			inRack = append(inRack, c)
		} else {
			elsewhere = append(elsewhere, c)
		}
	}
	if len(inRack) > 0 {
		return PlacementResult{Server: twoChoices(inRack, rng)}, nil
	}
	if req.Rack != "" && req.AllowCrossRack && len(elsewhere) > 0 {
		return PlacementResult{Server: twoChoices(elsewhere, rng), CrossRack: true}, nil
	}
	return PlacementResult{}, &NoCapacityError{Rack: req.Rack, Need: req.Need, AllowCrossRack: req.AllowCrossRack}
}

// twoChoices samples two distinct candidates and returns the less loaded.
func twoChoices(cands []Candidate, rng *rand.Rand) Candidate {
	// Sorted first so the same rng draws give the same servers whatever
	// order the pool's status lists them in.
	cands = slices.Clone(cands)
	slices.SortFunc(cands, func(a, b Candidate) int { return cmp.Compare(a.Name, b.Name) })
	if len(cands) == 1 {
		return cands[0]
	}
	i := rng.IntN(len(cands))
	j := rng.IntN(len(cands) - 1)
	if j >= i {
		j++
	}
	if lessLoaded(cands[j], cands[i]) {
		return cands[j]
	}
	return cands[i]
}

// lessLoaded orders by IOPS, then allocated bytes, then name.
func lessLoaded(a, b Candidate) bool {
	if c := cmp.Compare(a.IOPS, b.IOPS); c != 0 {
		return c < 0
	}
	if c := cmp.Compare(a.Allocated, b.Allocated); c != 0 {
		return c < 0
	}
	return a.Name < b.Name
}

// placedCache is a volume's cache on a server: its device once applied
// ("" while the dataplane has not chosen one yet) and its size.
type placedCache struct {
	Device string
	Bytes  int64
}

// largestFree is the room left on a server's roomiest cache device. Volumes
// on a known device take from it; the others (placed, not applied yet) are
// given, largest first, to the device with the most room, as the dataplane
// will choose for them.
func largestFree(devices []rcv1.DeviceStatus, placed []placedCache) int64 {
	free := make(map[string]int64, len(devices))
	for _, d := range devices {
		free[d.Name] = d.Capacity.Value()
	}
	var pending []int64
	for _, p := range placed {
		if _, ok := free[p.Device]; ok {
			free[p.Device] -= p.Bytes
		} else {
			pending = append(pending, p.Bytes)
		}
	}
	roomiest := func() string {
		best := ""
		for _, d := range devices {
			if best == "" || free[d.Name] > free[best] {
				best = d.Name
			}
		}
		return best
	}
	slices.SortFunc(pending, func(a, b int64) int { return cmp.Compare(b, a) })
	for _, b := range pending {
		free[roomiest()] -= b
	}
	return free[roomiest()]
}
