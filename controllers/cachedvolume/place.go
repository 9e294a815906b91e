package cachedvolume

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
)

// place chooses a server for the volume (never exclude, nor its mirror)
// and records it in status; false when no server has room (status says
// why).
func (r *Reconciler) place(ctx context.Context, s *scope, exclude string, replaced bool) bool {
	vol, pool := s.vol, s.pool
	alloc, err := r.allocation(ctx, pool.Name, vol.Name)
	if err != nil {
		s.obs.DataplaneError = err.Error()
		return false
	}
	req := PlacementRequest{Rack: vol.Spec.Rack, Need: s.cacheSize, AllowCrossRack: allowCrossRack(pool),
		Exclude: nonEmpty(exclude, vol.Status.Mirror)}
	res, err := Place(candidates(pool, alloc), req, r.rng())
	if err != nil {
		s.obs.NoCapacity = err.Error()
		return false
	}
	st := &vol.Status
	st.Server, st.Rack, st.CrossRack, st.Address = res.Server.Name, res.Server.Rack, res.CrossRack, ""
	st.Epoch++
	s.obs.Placed, s.placedNow = true, true
	switch {
	case replaced:
		s.obs.PlacedReason = rcv1.ReasonReplaced
		s.obs.PlacedMessage = fmt.Sprintf("re-placed on %s (rack %q) after server %s was lost; the cache starts cold", res.Server.Name, res.Server.Rack, exclude)
	case res.CrossRack:
		s.obs.PlacedReason = rcv1.ReasonPlacedCrossRack
		s.obs.PlacedMessage = fmt.Sprintf("rack %s has no server with room; placed on %s in rack %s", vol.Spec.Rack, res.Server.Name, res.Server.Rack)
	case vol.Spec.Rack == "":
		s.obs.PlacedReason = rcv1.ReasonPlacedInRack
		s.obs.PlacedMessage = fmt.Sprintf("no rack wanted; placed on %s (rack %q)", res.Server.Name, res.Server.Rack)
	default:
		s.obs.PlacedReason = rcv1.ReasonPlacedInRack
		s.obs.PlacedMessage = fmt.Sprintf("placed on %s in rack %s", res.Server.Name, res.Server.Rack)
	}
	ctrl.LoggerFrom(ctx).Info("volume placed", "server", res.Server.Name, "rack", res.Server.Rack, "crossRack", res.CrossRack)
	if res.CrossRack {
		r.event(vol, corev1.EventTypeWarning, "Placed", "%s", s.obs.PlacedMessage)
	} else {
		r.event(vol, corev1.EventTypeNormal, "Placed", "%s", s.obs.PlacedMessage)
	}
	return true
}

func allowCrossRack(pool *rcv1.CachePool) bool {
	// The API's default is true.
	return pool.Spec.Placement.AllowCrossRack == nil || *pool.Spec.Placement.AllowCrossRack
}

// allocation sums, per server, the cache sizes of the pool's other volumes
// (their status, written by this reconciler's passes: fresher than the
// pool's status, which is read from the dataplanes on the pool's cycle).
func (r *Reconciler) allocation(ctx context.Context, pool, self string) (map[string][]placedCache, error) {
	var vols rcv1.CachedVolumeList
	if err := r.apiReader().List(ctx, &vols); err != nil {
		return nil, fmt.Errorf("list CachedVolumes to compute allocation: %w", err)
	}
	out := map[string][]placedCache{}
	for i := range vols.Items {
		v := &vols.Items[i]
		if v.Name == self || v.Spec.PoolName != pool || v.Status.Server == "" || v.Status.CacheSize == nil {
			continue
		}
		out[v.Status.Server] = append(out[v.Status.Server], placedCache{Device: v.Status.CacheDevice, Bytes: v.Status.CacheSize.Value()})
		// A mirror holds a cache of the same size on its own server.
		if v.Status.Mirror != "" {
			out[v.Status.Mirror] = append(out[v.Status.Mirror], placedCache{Device: v.Status.MirrorCacheDevice, Bytes: v.Status.CacheSize.Value()})
		}
	}
	return out, nil
}

// candidates are the pool's servers as placement sees them.
func candidates(pool *rcv1.CachePool, alloc map[string][]placedCache) []Candidate {
	out := make([]Candidate, 0, len(pool.Status.Servers))
	for _, s := range pool.Status.Servers {
		c := Candidate{Name: s.NodeName, Rack: s.Rack, Ready: s.Ready, IOPS: s.IOPS}
		for _, p := range alloc[s.NodeName] {
			c.Allocated += p.Bytes
		}
		if s.Capacity != nil {
			c.Capacity = s.Capacity.Value()
		}
		if len(s.Devices) > 0 {
			c.LargestFree, c.KnowsDevices = largestFree(s.Devices, alloc[s.NodeName]), true
		}
		out = append(out, c)
	}
	return out
}

// nonEmpty lists the names given that are not "".
func nonEmpty(names ...string) []string {
	var out []string
	for _, n := range names {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}
