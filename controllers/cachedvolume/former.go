package cachedvolume

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dataplane"
)

// A write-through volume re-placed away from a lost server leaves its
// objects there: a server that returns with its persisted configuration
// serves the volume's subsystem again, over a cache that is stale by then
// (the new server took the writes). status.formerServers remembers such
// servers; each pass revokes every host there and tears the objects down
// once the server answers, before anything else of the pass.

// rememberFormerServer records that the volume leaves server.
func rememberFormerServer(vol *rcv1.CachedVolume, server string) {
	if server != "" && !slices.Contains(vol.Status.FormerServers, server) {
		vol.Status.FormerServers = append(vol.Status.FormerServers, server)
	}
}

// cleanFormerServers removes the volume's objects from every former server
// that is ready and answers, and forgets the servers it cleaned. Servers
// that are still lost stay listed. It returns whether the volume's current
// server is still listed: its stale objects must go before the volume is
// applied there again (a fresh cache, never the stale one).
func (r *Reconciler) cleanFormerServers(ctx context.Context, s *scope) bool {
	vol, pool := s.vol, s.pool
	var left []string
	for _, name := range vol.Status.FormerServers {
		done, err := r.cleanFormerServer(ctx, pool, vol, name)
		if err != nil {
			ctrl.LoggerFrom(ctx).Info("former cache server not cleaned yet", "server", name, "error", err.Error())
		}
		if !done {
			left = append(left, name)
			continue
		}
		r.event(vol, corev1.EventTypeNormal, "FormerServerCleaned",
			"removed the volume's stale subsystem and cache from former cache server %s", name)
	}
	vol.Status.FormerServers = left
	return slices.Contains(left, vol.Status.Server)
}

// supersededCopy: a former server's copy whose dirty data another server
// has too: a write-back mirror's (its owner has every dirty byte of it, or
// Ceph has), or an owner's from an older epoch (its mirror was promoted
// holding every write it acknowledged).
func supersededCopy(st *dataplane.CacheStats, vol *rcv1.CachedVolume) bool {
	return st.Role == dataplane.RoleMirror || (st.Epoch != nil && *st.Epoch < uint64(vol.Status.Epoch))
}

// cleanFormerServer revokes every host of the volume's subsystem on server
// and tears its objects down; done when nothing of the volume is left. A
// server not ready is left for a later pass. Dirty data there is never
// flushed (it would overwrite newer writes in Ceph) nor discarded: the
// server stays listed and the error says so.
func (r *Reconciler) cleanFormerServer(ctx context.Context, pool *rcv1.CachePool, vol *rcv1.CachedVolume, name string) (bool, error) {
	server := findServer(pool, name)
	if server == nil || !server.Ready {
		return false, nil
	}
	c, err := r.dataplaneClient(ctx, pool.Name, server)
	if err != nil {
		return false, err
	}
	if err := RevokeHosts(ctx, c, SubsystemNQN(vol.Name), nil); err != nil {
		return false, err
	}
	cached := CachedBdevName(vol.Name)
	if have, err := lookupCachedBdev(ctx, c, cached); err != nil {
		return false, err
	} else if have != nil {
		st, err := c.CachedBdevStats(ctx, cached)
		if err != nil {
			return false, fmt.Errorf("read cached bdev %s on former server %s: %w", cached, name, err)
		}
		if st.DirtyBytes > 0 && supersededCopy(st, vol) {
			// Its dirty data is the promoted mirror's or its owner's too:
			// deleted unflushed, never written over newer data.
			if err := resetMirrorCopy(ctx, c, vol.Name); err != nil {
				return false, fmt.Errorf("delete the superseded copy on former server %s: %w", name, err)
			}
			ctrl.LoggerFrom(ctx).Info("deleted a superseded write-back copy on a former server", "server", name,
				"dirtyBytes", st.DirtyBytes, "role", st.Role, "epoch", st.Epoch, "volumeEpoch", vol.Status.Epoch)
		} else if st.DirtyBytes > 0 {
			return false, fmt.Errorf("cached bdev %s on former server %s holds %d dirty bytes; not flushing them over newer data, not discarding them: remove it by hand (bdev_adacache_delete with force) once they are known to be obsolete",
				cached, name, st.DirtyBytes)
		}
	}
	// A cache there that is not loaded stays: it may hold dirty data.
	res, err := Teardown(ctx, c, vol.Name, "", nil)
	if err != nil {
		return false, fmt.Errorf("tear down on former server %s: %w", name, err)
	}
	return res.Done, nil
}
