package cachedvolume

import (
	"context"
	"fmt"

	"github.com/rackcache/rackcache/controllers/dataplane"
)

// TeardownResult says how far Teardown got.
type TeardownResult struct {
	// Done: nothing of the volume is left on the dataplane.
	Done bool
	// Flush is the flush's progress while dirty data is written to Ceph.
	Flush *dataplane.FlushStatus
	// FlushedBytes is what the last flush wrote (for the Flushed event).
	FlushedBytes uint64
}

// Teardown removes a volume from its dataplane, one step per call where a
// step has to wait: the subsystem first (hosts are cut off, so nothing new
// gets dirty), then the dirty data is flushed to Ceph (polled across
// passes), then the cached bdev is deleted (without force: it would discard
// what is still dirty), the RBD bdev, and the cluster registration when no
// other volume uses it. Every step tolerates what is already gone.
//
// A cache of the volume that a device holds but no cached bdev serves
// (refused as damaged, or never loaded) cannot be flushed: discardUnattached
// says what to do with it. nil leaves it; true discards it (the volume held
// no dirty data, or its owner gave it up); false stops the teardown with an
// error saying so.
func Teardown(ctx context.Context, c *dataplane.Client, name, cluster string, discardUnattached *bool) (TeardownResult, error) {
	var res TeardownResult
	nqn := SubsystemNQN(name)
	sub, err := lookupSubsystem(ctx, c, nqn)
	if err != nil {
		return res, err
	}
	if sub != nil {
		if err := c.DeleteSubsystem(ctx, nqn); err != nil && !dataplane.IsInvalid(err) && !dataplane.IsNotFound(err) {
			return res, fmt.Errorf("delete subsystem %s: %w", nqn, err)
		}
	}
	// A write-back mirror's replication subsystem goes too.
	if err := c.DeleteSubsystem(ctx, ReplicaNQN(name)); err != nil && !dataplane.IsInvalid(err) && !dataplane.IsNotFound(err) {
		return res, fmt.Errorf("delete replication subsystem %s: %w", ReplicaNQN(name), err)
	}
	// With the subsystems gone nothing uses the volume's keys.
	hostKeys, err := hostKeyNames(ctx, c, name)
	if err != nil {
		return res, err
	}
	replicaKeys, err := keyringNames(ctx, c, replicaKeyPrefix(name))
	if err != nil {
		return res, err
	}
	for _, keys := range []map[string]bool{hostKeys, replicaKeys} {
		if err := dropKeys(ctx, c, keys, nil); err != nil {
			return res, err
		}
	}
	cached := CachedBdevName(name)
	have, err := lookupCachedBdev(ctx, c, cached)
	if err != nil {
		return res, err
	}
	if have != nil {
		st, err := startOrPollFlush(ctx, c, cached)
		if err != nil {
			return res, err
		}
		if st.InProgress || st.DirtyBytes > 0 {
			res.Flush = st
			return res, nil
		}
		res.FlushedBytes = st.FlushedBytes
		if err := c.DeleteCachedBdev(ctx, cached, false); err != nil && !dataplane.IsNotFound(err) {
			return res, fmt.Errorf("delete cached bdev %s: %w", cached, err)
		}
	} else if discardUnattached != nil {
		if err := removeUnattached(ctx, c, cached, *discardUnattached); err != nil {
			return res, err
		}
	}
	rbd := RbdBdevName(name)
	if err := c.DeleteRbdBdev(ctx, rbd); err != nil && !dataplane.IsNotFound(err) {
		return res, fmt.Errorf("close rbd bdev %s: %w", rbd, err)
	}
	if cluster != "" {
		// Busy: another volume of the pool still uses the registration.
		if err := c.UnregisterRbdCluster(ctx, cluster); err != nil && !dataplane.IsNotFound(err) && !dataplane.IsBusy(err) {
			return res, fmt.Errorf("unregister Ceph cluster %s: %w", cluster, err)
		}
	}
	res.Done = true
	return res, nil
}

// removeUnattached discards the cache named cached that a device holds but
// no cached bdev serves, if discard; otherwise refuses while it is there.
func removeUnattached(ctx context.Context, c *dataplane.Client, cached string, discard bool) error {
	devices, err := c.CacheDevices(ctx)
	if err != nil {
		return fmt.Errorf("list cache devices: %w", err)
	}
	dev := deviceHolding(devices, cached)
	switch {
	case dev == "":
		return nil
	case !discard:
		return fmt.Errorf("cache device %s holds this write-back volume's cache, not loaded (see the Degraded condition); "+
			"its dirty data cannot be written to Ceph, so deletion waits: to give it up, annotate the volume %s=\"true\"", dev, DiscardDirtyDataAnnotation)
	}
	if err := c.DeleteCachedBdev(ctx, cached, true); err != nil && !dataplane.IsNotFound(err) {
		return fmt.Errorf("discard the unattached cache %s on %s: %w", cached, dev, err)
	}
	return nil
}
