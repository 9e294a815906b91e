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
func Teardown(ctx context.Context, c *dataplane.Client, name, cluster string) (TeardownResult, error) {
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
	// With the subsystem gone no host uses the volume's keys.
	keys, err := keyringNames(ctx, c, keyPrefix(name))
	if err != nil {
		return res, err
	}
	if err := dropKeys(ctx, c, keys, nil); err != nil {
		return res, err
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
