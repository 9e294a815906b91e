package cachedvolume

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/rackcache/rackcache/controllers/dataplane"
)

// ApplyResult says what Apply found and did on a dataplane.
type ApplyResult struct {
	// Created lists the objects that had to be created; empty when the
	// dataplane already had everything.
	Created []string
	// Changed lists in-place changes (hosts, listener, policies, size, mode).
	Changed []string
	// Loaded: the cached bdev was re-attached to its cache on the device
	// (a dataplane restarted without its configuration).
	Loaded bool
	// CacheDevice is the cache bdev holding the volume's cache.
	CacheDevice string
	// WriteMode is the mode the dataplane runs the volume with.
	WriteMode string
	// Flushing is set while dirty data is written to Ceph before leaving
	// write-back; the mode switches on a later pass once nothing is dirty.
	Flushing *dataplane.FlushStatus
	// Degraded: the cached bdev reports its cache device failed.
	Degraded bool
	// ANAState is the state the server's listener reports for the
	// volume ("" for a subsystem without ANA reporting).
	ANAState dataplane.ANAState
	// ANAReporting and MinCntlid describe the subsystem found or made.
	ANAReporting bool
	MinCntlid    uint16
}

// Apply makes the dataplane hold d: each step reads what is there and
// creates or changes only what differs, so it converges from any partial
// state (a pass cut short, a dataplane restarted with or without its
// persisted configuration) and a second call changes nothing.
func Apply(ctx context.Context, c *dataplane.Client, d Desired) (ApplyResult, error) {
	var res ApplyResult
	steps := []func(context.Context, *dataplane.Client, Desired, *ApplyResult) error{
		ensureTransport,
		ensureCluster,
		ensureRbdBdev,
		ensureCachedBdev,
		ensureReplication,
		ensureRole,
		ensureSubsystem,
	}
	for _, step := range steps {
		if err := step(ctx, c, d, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

func ensureTransport(ctx context.Context, c *dataplane.Client, _ Desired, res *ApplyResult) error {
	var transports []struct {
		TrType string `json:"trtype"`
	}
	if err := c.Call(ctx, "nvmf_get_transports", nil, &transports); err != nil {
		return fmt.Errorf("list NVMe-oF transports: %w", err)
	}
	if slices.ContainsFunc(transports, func(t struct {
		TrType string `json:"trtype"`
	}) bool {
		return strings.EqualFold(t.TrType, "TCP")
	}) {
		return nil
	}
	if err := c.CreateTransport(ctx, dataplane.Transport{TrType: "TCP"}); err != nil {
		return fmt.Errorf("create the TCP transport: %w", err)
	}
	res.Created = append(res.Created, "transport")
	return nil
}

func ensureCluster(ctx context.Context, c *dataplane.Client, d Desired, res *ApplyResult) error {
	_, err := c.RegisterRbdCluster(ctx, d.Cluster)
	switch {
	case dataplane.IsExists(err):
		return nil
	case err != nil:
		return fmt.Errorf("register Ceph cluster %s: %w", d.Cluster.Name, err)
	}
	res.Created = append(res.Created, "cluster "+d.Cluster.Name)
	return nil
}

func ensureRbdBdev(ctx context.Context, c *dataplane.Client, d Desired, res *ApplyResult) error {
	bdevs, err := c.Bdevs(ctx, d.Rbd.Name)
	switch {
	case err == nil:
	case !dataplane.IsNotFound(err):
		return fmt.Errorf("look up rbd bdev %s: %w", d.Rbd.Name, err)
	default:
		if _, err := c.CreateRbdBdev(ctx, d.Rbd); err != nil && !dataplane.IsExists(err) {
			return fmt.Errorf("open rbd image %s/%s as bdev %s: %w", d.Rbd.PoolName, d.Rbd.RbdName, d.Rbd.Name, err)
		}
		res.Created = append(res.Created, "rbd bdev "+d.Rbd.Name)
		if bdevs, err = c.Bdevs(ctx, d.Rbd.Name); err != nil {
			return fmt.Errorf("look up rbd bdev %s: %w", d.Rbd.Name, err)
		}
	}
	return growRbdBdev(ctx, c, d, bdevs, res)
}

// growRbdBdev grows the image, and through it the cached bdev and the
// namespace, to the volume's size when it is smaller. The dataplane
// only grows: an image larger than spec.size (grown elsewhere) stays.
func growRbdBdev(ctx context.Context, c *dataplane.Client, d Desired, bdevs []dataplane.Bdev, res *ApplyResult) error {
	if len(bdevs) != 1 || d.SizeBytes <= 0 || bdevs[0].SizeBytes() >= uint64(d.SizeBytes) {
		return nil
	}
	mib := (uint64(d.SizeBytes) + 1<<20 - 1) >> 20
	if err := c.ResizeRbdBdev(ctx, d.Rbd.Name, mib); err != nil {
		return fmt.Errorf("grow rbd bdev %s from %d bytes to %d MiB: %w", d.Rbd.Name, bdevs[0].SizeBytes(), mib, err)
	}
	res.Changed = append(res.Changed, fmt.Sprintf("volume size %d MiB", mib))
	return nil
}

// lookupCachedBdev returns the cached bdev name, or nil when there is none.
func lookupCachedBdev(ctx context.Context, c *dataplane.Client, name string) (*dataplane.CachedBdev, error) {
	bdevs, err := c.CachedBdevs(ctx, name)
	if dataplane.IsNotFound(err) || dataplane.IsInvalid(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up cached bdev %s: %w", name, err)
	}
	for i := range bdevs {
		if bdevs[i].Name == name {
			return &bdevs[i], nil
		}
	}
	return nil, nil
}

func ensureCachedBdev(ctx context.Context, c *dataplane.Client, d Desired, res *ApplyResult) error {
	have, err := lookupCachedBdev(ctx, c, d.Cached.Name)
	if err != nil {
		return err
	}
	if have == nil {
		if err := createCachedBdev(ctx, c, d, res); err != nil {
			return err
		}
		if res.Loaded && d.FreshCache {
			if err := discardStaleCache(ctx, c, d, res); err != nil {
				return err
			}
		}
		if have, err = lookupCachedBdev(ctx, c, d.Cached.Name); err != nil {
			return err
		}
		if have == nil {
			return fmt.Errorf("cached bdev %s is missing right after its creation", d.Cached.Name)
		}
	}
	res.CacheDevice = have.CacheBdevName
	res.Degraded = have.Degraded
	res.WriteMode = have.WriteMode
	if err := reconcilePolicy(ctx, c, d.Cached, have, res); err != nil {
		return err
	}
	if have.CacheSizeMiB != d.Cached.CacheSizeMiB {
		if err := c.ResizeCachedBdev(ctx, d.Cached.Name, d.Cached.CacheSizeMiB); err != nil {
			return fmt.Errorf("resize cached bdev %s from %d to %d MiB: %w", d.Cached.Name, have.CacheSizeMiB, d.Cached.CacheSizeMiB, err)
		}
		res.Changed = append(res.Changed, fmt.Sprintf("cache size %d MiB", d.Cached.CacheSizeMiB))
	}
	return reconcileWriteMode(ctx, c, d.Cached, have, res)
}

// staleCacheDiscarded starts the ApplyResult.Changed entry of a discard.
const staleCacheDiscarded = "discarded a stale cache"

// discardStaleCache replaces the cache createCachedBdev found and loaded
// with a new, empty one on the same device: what the server cached when it
// served the volume before is stale (another server took the writes
// since). A cache holding dirty data is never discarded.
func discardStaleCache(ctx context.Context, c *dataplane.Client, d Desired, res *ApplyResult) error {
	name := d.Cached.Name
	have, err := lookupCachedBdev(ctx, c, name)
	if err != nil {
		return fmt.Errorf("look up the stale cache of %s: %w", name, err)
	}
	if have == nil {
		return fmt.Errorf("cached bdev %s is missing right after it was loaded", name)
	}
	st, err := c.CachedBdevStats(ctx, name)
	if err != nil {
		return fmt.Errorf("read the stale cache of %s: %w", name, err)
	}
	// A write-back mirror's dirty data is the owner's too (or in Ceph):
	// its stale copy goes, dirty or not.
	obsolete := d.Cached.Role == dataplane.RoleMirror
	if st.DirtyBytes > 0 && !obsolete {
		return fmt.Errorf("cached bdev %s found on %s holds %d dirty bytes; not discarding them to make a fresh cache: remove it by hand (bdev_adacache_delete with force) once they are known to be obsolete",
			name, have.CacheBdevName, st.DirtyBytes)
	}
	if err := c.DeleteCachedBdev(ctx, name, st.DirtyBytes > 0); err != nil {
		return fmt.Errorf("discard the stale cache of %s on %s: %w", name, have.CacheBdevName, err)
	}
	res.Changed = append(res.Changed, staleCacheDiscarded+" on "+have.CacheBdevName)
	return createOn(ctx, c, d.Cached, have.CacheBdevName, false, res)
}

// createCachedBdev attaches to the volume's cache where a device already
// holds it (load), and only otherwise creates a new one on the device with
// most room: creating without load over an existing cache would discard
// its dirty data.
//
// The dataplane lists only the cache devices it has opened; a restarted
// dataplane opens them again on the first create. So devices not listed are
// first asked to load the volume (which opens a formatted device, or fails
// on a blank one); only what is still unlisted after that is blank.
func createCachedBdev(ctx context.Context, c *dataplane.Client, d Desired, res *ApplyResult) error {
	devices, err := c.CacheDevices(ctx)
	if err != nil {
		return fmt.Errorf("list cache devices: %w", err)
	}
	p := d.Cached
	if dev := deviceHolding(devices, p.Name); dev != "" {
		return createOn(ctx, c, p, dev, true, res)
	}
	// Devices refused as not blank or damaged: never formatted unless the
	// pool says wipe; named in the error when nothing else takes the volume.
	var refused []error
	for _, name := range unopened(devices, d.CacheDevices) {
		err := createOn(ctx, c, p, name, true, res)
		if err == nil {
			return nil
		}
		// Invalid: formatted, without this volume; not found: blank or
		// absent (or another system's); corrupt: damaged, not loaded.
		switch {
		case dataplane.IsCorrupt(err) && d.MustLoad:
			return err
		case dataplane.IsCorrupt(err) && !slices.Contains(d.WipeDevices, name):
			refused = append(refused, err)
		case !dataplane.IsInvalid(err) && !dataplane.IsNotFound(err) && !dataplane.IsCorrupt(err):
			return err
		}
	}
	if d.MustLoad {
		return fmt.Errorf("create cached bdev %s: its cache, which may hold dirty data, is on none of the cache devices %s this server can open; "+
			"not creating a fresh cache in its place (that would serve stale data from Ceph): bring the device back",
			p.Name, strings.Join(d.CacheDevices, ", "))
	}
	if devices, err = c.CacheDevices(ctx); err != nil {
		return fmt.Errorf("list cache devices: %w", err)
	}
	var best *dataplane.CacheDevice
	for i := range devices {
		dev := &devices[i]
		if slices.Contains(d.CacheDevices, dev.CacheBdevName) && (best == nil || dev.FreeMiB > best.FreeMiB) {
			best = dev
		}
	}
	if best != nil && best.FreeMiB >= p.CacheSizeMiB {
		return createOn(ctx, c, p, best.CacheBdevName, false, res)
	}
	// Blank devices: the first create formats them; one that is not blank
	// only when the pool says wipe.
	for _, name := range unopened(devices, d.CacheDevices) {
		err := createOn(ctx, c, p, name, false, res)
		if (dataplane.IsNotBlank(err) || dataplane.IsCorrupt(err)) && slices.Contains(d.WipeDevices, name) {
			wipe := p
			wipe.ForceFormat = true
			err = createOn(ctx, c, wipe, name, false, res)
		}
		switch {
		case err == nil:
			return nil
		case dataplane.IsNotBlank(err) || dataplane.IsCorrupt(err):
			refused = append(refused, err)
		case !dataplane.IsNoSpace(err) && !dataplane.IsNotFound(err):
			return err
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("create cached bdev %s: no usable cache device; refused (set wipe: true on the CachePool device to erase it): %w", p.Name, errors.Join(refused...))
	}
	if best == nil {
		return fmt.Errorf("create cached bdev %s: none of the cache devices %s is usable on this server", p.Name, strings.Join(d.CacheDevices, ", "))
	}
	return fmt.Errorf("create cached bdev %s: the cache device with most room (%s) has %d MiB free, %d MiB needed", p.Name, best.CacheBdevName, best.FreeMiB, p.CacheSizeMiB)
}

// deviceHolding names the listed device holding volume's cache ("" none).
func deviceHolding(devices []dataplane.CacheDevice, volume string) string {
	for _, dev := range devices {
		if slices.ContainsFunc(dev.Volumes, func(v dataplane.CacheVolume) bool { return v.Name == volume }) {
			return dev.CacheBdevName
		}
	}
	return ""
}

// unopened are the wanted cache devices the dataplane does not list.
func unopened(devices []dataplane.CacheDevice, wanted []string) []string {
	var out []string
	for _, name := range wanted {
		if !slices.ContainsFunc(devices, func(d dataplane.CacheDevice) bool { return d.CacheBdevName == name }) {
			out = append(out, name)
		}
	}
	return out
}

func createOn(ctx context.Context, c *dataplane.Client, p dataplane.CachedBdevParams, device string, load bool, res *ApplyResult) error {
	p.CacheBdevName, p.Load = device, load
	if _, err := c.CreateCachedBdev(ctx, p); err != nil && !dataplane.IsExists(err) {
		return fmt.Errorf("create cached bdev %s on %s (load %v): %w", p.Name, device, load, err)
	}
	res.Created = append(res.Created, "cached bdev "+p.Name)
	res.Loaded = load
	return nil
}

// reconcilePolicy changes the policies that differ from what the volume
// asks. Only the fields the volume sets are compared: the dataplane reports
// its defaults for the rest.
func reconcilePolicy(ctx context.Context, c *dataplane.Client, want dataplane.CachedBdevParams, have *dataplane.CachedBdev, res *ApplyResult) error {
	var change dataplane.PolicyChange
	var what []string
	if want.Admission != "" && want.Admission != have.Params.Admission {
		change.Admission = want.Admission
		what = append(what, "admission")
	}
	if want.Eviction != "" && want.Eviction != have.Params.Eviction {
		change.Eviction = want.Eviction
		what = append(what, "eviction")
	}
	if want.Cleaning != nil && !cleaningSatisfied(want.Cleaning, have.Params.Cleaning) {
		change.Cleaning = want.Cleaning
		what = append(what, "cleaning")
	}
	if want.SeqCutoff != nil && !seqCutoffSatisfied(want.SeqCutoff, have.Params.SeqCutoff) {
		change.SeqCutoff = want.SeqCutoff
		what = append(what, "sequential cutoff")
	}
	if len(what) == 0 {
		return nil
	}
	if err := c.SetCachedBdevPolicy(ctx, want.Name, change); err != nil {
		return fmt.Errorf("change %s of cached bdev %s: %w", strings.Join(what, ", "), want.Name, err)
	}
	res.Changed = append(res.Changed, "policy "+strings.Join(what, ", "))
	return nil
}

// cleaningSatisfied: have runs want's policy with every parameter want sets.
func cleaningSatisfied(want, have *dataplane.Cleaning) bool {
	if have == nil {
		return false
	}
	same := func(w, h uint64) bool { return w == 0 || w == h }
	return want.Policy == have.Policy &&
		same(want.StalenessMs, have.StalenessMs) &&
		same(uint64(want.MaxBatch), uint64(have.MaxBatch)) &&
		same(want.ActivityThresholdMs, have.ActivityThresholdMs) &&
		same(want.WakeUpMs, have.WakeUpMs) &&
		same(uint64(want.BatchBlocks), uint64(have.BatchBlocks)) &&
		(want.DirtyRatio == 0 || want.DirtyRatio == have.DirtyRatio)
}

func seqCutoffSatisfied(want, have *dataplane.SeqCutoff) bool {
	return have != nil && want.Policy == have.Policy && (want.ThresholdKiB == 0 || want.ThresholdKiB == have.ThresholdKiB)
}

// reconcileWriteMode switches the write mode. Leaving write-back first
// flushes in the background, polled pass by pass, so the switch (which
// holds the dataplane's control lock while it flushes) finds little left.
func reconcileWriteMode(ctx context.Context, c *dataplane.Client, want dataplane.CachedBdevParams, have *dataplane.CachedBdev, res *ApplyResult) error {
	if want.WriteMode == "" || have.WriteMode == want.WriteMode {
		return nil
	}
	if have.WriteMode == dataplane.WriteBack && want.WriteMode != dataplane.PassThrough {
		// Write-through or write-around: the dataplane writes through at
		// once and flushes, so the switch ends however busy the volume is
		// (a snapshot's hold under load); it reports the new mode when done.
		st, err := c.CachedBdevFlushStatus(ctx, want.Name)
		if err != nil {
			return fmt.Errorf("read flush status of cached bdev %s: %w", want.Name, err)
		}
		if st.InProgress || st.DirtyBytes > 0 {
			if err := c.StartCachedBdevMode(ctx, want.Name, want.WriteMode); err != nil {
				return fmt.Errorf("start switching cached bdev %s from %s to %s: %w", want.Name, have.WriteMode, want.WriteMode, err)
			}
			st.InProgress = true
			res.Flushing = st
			return nil
		}
	} else if have.WriteMode == dataplane.WriteBack {
		st, err := startOrPollFlush(ctx, c, want.Name)
		if err != nil {
			return err
		}
		if st.InProgress || st.DirtyBytes > 0 {
			res.Flushing = st
			return nil
		}
	}
	if err := c.SetCachedBdevMode(ctx, want.Name, want.WriteMode); err != nil {
		return fmt.Errorf("switch cached bdev %s from %s to %s: %w", want.Name, have.WriteMode, want.WriteMode, err)
	}
	res.WriteMode = want.WriteMode
	res.Changed = append(res.Changed, "write mode "+want.WriteMode)
	return nil
}

// startOrPollFlush reads a flush's progress and starts one when dirty data
// waits and none runs (also after a failed flush: its error is returned in
// the status so the caller can report it while retrying).
func startOrPollFlush(ctx context.Context, c *dataplane.Client, name string) (*dataplane.FlushStatus, error) {
	st, err := c.CachedBdevFlushStatus(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("read flush status of cached bdev %s: %w", name, err)
	}
	if st.InProgress || st.DirtyBytes == 0 {
		return st, nil
	}
	if err := c.FlushCachedBdev(ctx, name); err != nil {
		return nil, fmt.Errorf("start flushing cached bdev %s: %w", name, err)
	}
	st.InProgress = true
	return st, nil
}
