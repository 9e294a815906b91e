package cachepool

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/resource"
	ctrl "sigs.k8s.io/controller-runtime"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/cachedvolume"
	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/controllers/servers"
)

const mib = 1 << 20

// serverReading is what one pass learned about one cache server.
type serverReading struct {
	Server servers.Server
	// Answered: every JSON-RPC call of the pass succeeded; the figures
	// below are only meaningful then.
	Answered bool
	Version  string
	// DataAddress is where the server serves NVMe/TCP when the pool names
	// a data path ("" when it names none).
	DataAddress    string
	CapacityBytes  int64
	AllocatedBytes int64
	// Devices are the capacities of the cache devices the server has.
	Devices []rcv1.DeviceStatus
	Volumes int32
	IOPS    int64
	// MissingCacheBdevs are cacheN bdevs of the pool's devices the server
	// does not have (the device could not be opened at start).
	MissingCacheBdevs []string
	// DeviceErrors say why missing cache bdevs could not be opened now.
	DeviceErrors []string
	// DegradedVolumes are cached bdevs whose cache device failed.
	DegradedVolumes []string
	// ConfigErrors are the server's kept failed start-up calls, one line
	// each (those of deleted volumes dropped).
	ConfigErrors []string
	// liveObjects are the names of every existing volume's objects
	// (cached bdev, RBD bdev, subsystem NQN); nil when unknown, and then
	// no kept call is dropped.
	liveObjects map[string]bool
	// Failure says which call failed and why (when !Answered).
	Failure string
}

// ioSample is one bdev_get_iostat reading of a server's cached bdevs, on
// the dataplane's own clock.
type ioSample struct {
	Ops      uint64
	Ticks    uint64
	TickRate uint64
}

// ioTracker keeps each server's previous I/O sample, per pool and node, to
// turn counters into a rate.
type ioTracker struct {
	mu   sync.Mutex
	last map[string]ioSample
}

// rate records cur for pool/node and returns the operations per second
// since the previous sample (0 for the first, or after a restart reset the
// counters).
func (t *ioTracker) rate(pool, node string, cur ioSample) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last == nil {
		t.last = map[string]ioSample{}
	}
	key := pool + "/" + node
	prev, ok := t.last[key]
	t.last[key] = cur
	if !ok {
		return 0
	}
	return opsPerSecond(prev, cur)
}

// forget drops every sample of pool.
func (t *ioTracker) forget(pool string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.last {
		if len(k) > len(pool) && k[:len(pool)+1] == pool+"/" {
			delete(t.last, k)
		}
	}
}

// opsPerSecond is the rate between two samples; counters or clocks going
// backwards (a restarted dataplane) give 0.
func opsPerSecond(prev, cur ioSample) int64 {
	if cur.TickRate == 0 || cur.Ticks <= prev.Ticks || cur.Ops < prev.Ops {
		return 0
	}
	seconds := float64(cur.Ticks-prev.Ticks) / float64(cur.TickRate)
	return int64(float64(cur.Ops-prev.Ops)/seconds + 0.5)
}

// readServer asks one server for its version, cache devices, cached bdevs
// and I/O counters. The first failing call ends the reading.
func (r *Reconciler) readServer(ctx context.Context, pool *rcv1.CachePool, s servers.Server, live map[string]bool) serverReading {
	out := serverReading{Server: s, liveObjects: live}
	if s.Address == "" {
		out.Failure = "the dataplane pod has no address yet"
		return out
	}
	if r.Connector == nil {
		out.Failure = "the operator has no dataplane connector configured"
		return out
	}
	c, err := r.Connector.Client(ctx, pool.Name, s.NodeName, s.Address)
	if err != nil {
		out.Failure = fmt.Sprintf("connect: %v", err)
		return out
	}
	if err := r.readInto(ctx, c, pool, &out); err != nil {
		out.Failure = err.Error()
		return out
	}
	out.Answered = true
	return out
}

func (r *Reconciler) readInto(ctx context.Context, c *dataplane.Client, pool *rcv1.CachePool, out *serverReading) error {
	v, err := c.Version(ctx)
	if err != nil {
		return err
	}
	out.Version = v.Version
	if out.DataAddress, err = dataAddress(ctx, c, pool.Spec.DataPath); err != nil {
		return err
	}
	bdevs, err := c.Bdevs(ctx, "")
	if err != nil {
		return err
	}
	var openErrs []string
	if bdevs, openErrs, err = ensureCacheBdevs(ctx, c, pool.Spec.Devices, bdevs); err != nil {
		return err
	}
	devices, err := c.CacheDevices(ctx)
	if err != nil {
		return err
	}
	cached, err := c.CachedBdevs(ctx, "")
	if err != nil {
		return err
	}
	stats, err := c.IOStat(ctx)
	if err != nil {
		return err
	}
	out.Devices, out.MissingCacheBdevs = deviceCapacities(pool.Spec.Devices, devices, bdevs)
	for _, d := range out.Devices {
		out.CapacityBytes += d.Capacity.Value()
	}
	out.DeviceErrors = openErrs
	out.AllocatedBytes = allocatedBytes(devices)
	out.Volumes = int32(len(cached))
	for _, b := range cached {
		if b.Degraded {
			out.DegradedVolumes = append(out.DegradedVolumes, b.Name)
		}
	}
	out.IOPS = r.io.rate(pool.Name, out.Server.NodeName, cachedBdevOps(stats, cached))
	out.ConfigErrors, err = keptConfigErrors(ctx, c, out.liveObjects)
	return err
}

// ensureCacheBdevs opens the pool's cache devices a running server lacks.
// The start-up ConfigMap only reaches a dataplane without a persisted
// configuration, so a device added to the pool later is opened here (and
// persisted by the dataplane); a device that cannot be opened stays
// missing, with the dataplane's reason. It returns the bdev list to read
// from.
func ensureCacheBdevs(ctx context.Context, c *dataplane.Client, spec []rcv1.CacheDevice, bdevs []dataplane.Bdev) ([]dataplane.Bdev, []string, error) {
	have := make(map[string]bool, len(bdevs))
	for i := range bdevs {
		have[bdevs[i].Name] = true
	}
	opened := false
	var errs []string
	for i, d := range spec {
		name := servers.CacheBdevName(i)
		if have[name] {
			continue
		}
		if _, err := c.CreateAioBdev(ctx, name, d.Path, cacheBlockSize); err != nil && !dataplane.IsExists(err) {
			// Other devices still count; this one is reported missing.
			errs = append(errs, fmt.Sprintf("%s (%s): %v", name, d.Path, err))
			continue
		}
		opened = true
	}
	if !opened {
		return bdevs, errs, nil
	}
	bdevs, err := c.Bdevs(ctx, "")
	return bdevs, errs, err
}

// deviceCapacities is the cache capacity of each device of the pool on
// one server: the room of the cache formatted on it (once a volume opened
// it), else the size of its bdev, capped by the device's size in the spec.
// It also returns the names of the cache bdevs the server lacks.
func deviceCapacities(spec []rcv1.CacheDevice, devices []dataplane.CacheDevice, bdevs []dataplane.Bdev) ([]rcv1.DeviceStatus, []string) {
	var out []rcv1.DeviceStatus
	var missing []string
	for i, d := range spec {
		name := servers.CacheBdevName(i)
		size, ok := deviceSize(name, devices, bdevs)
		if !ok {
			missing = append(missing, name)
			continue
		}
		if d.Size != nil && d.Size.Value() < size {
			size = d.Size.Value()
		}
		out = append(out, rcv1.DeviceStatus{Name: name, Capacity: *resource.NewQuantity(size, resource.BinarySI)})
	}
	return out, missing
}

func deviceSize(name string, devices []dataplane.CacheDevice, bdevs []dataplane.Bdev) (int64, bool) {
	for _, d := range devices {
		if d.CacheBdevName == name {
			return int64(d.TotalMiB) * mib, true
		}
	}
	for i := range bdevs {
		if bdevs[i].Name == name {
			return int64(bdevs[i].SizeBytes()), true
		}
	}
	return 0, false
}

// allocatedBytes is the cache given to volumes on every device.
func allocatedBytes(devices []dataplane.CacheDevice) int64 {
	var total int64
	for _, d := range devices {
		for _, v := range d.Volumes {
			total += int64(v.CacheSizeMiB) * mib
		}
	}
	return total
}

// cachedBdevOps sums the read and write operations of the cached bdevs
// only: the bdevs under them see the same I/O again.
func cachedBdevOps(stats *dataplane.IOStats, cached []dataplane.CachedBdev) ioSample {
	names := make(map[string]bool, len(cached))
	for _, b := range cached {
		names[b.Name] = true
	}
	out := ioSample{Ticks: stats.Ticks, TickRate: stats.TickRate}
	for _, b := range stats.Bdevs {
		if names[b.Name] {
			out.Ops += b.NumReadOps + b.NumWriteOps
		}
	}
	return out
}

// readServers reads every server at once: a slow server delays the pass
// by one timeout, not one per server.
func (r *Reconciler) readServers(ctx context.Context, pool *rcv1.CachePool, list []servers.Server, live map[string]bool) []serverReading {
	out := make([]serverReading, len(list))
	var wg sync.WaitGroup
	for i := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = r.readServer(ctx, pool, list[i], live)
		}()
	}
	wg.Wait()
	return out
}

// keptConfigErrors reads the server's kept failed start-up calls, drops
// those that make objects of volumes that no longer exist (deleted while
// the server was away: their images are gone, so they would fail on
// every start), and returns the rest, one line each. A dataplane without
// the method has none.
func keptConfigErrors(ctx context.Context, c *dataplane.Client, live map[string]bool) ([]string, error) {
	kept, err := c.ConfigErrors(ctx)
	if dataplane.IsMethodNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, e := range kept {
		if live != nil && cachedvolume.IsVolumeObject(e.Object) && !live[e.Object] {
			if err := c.DropConfigError(ctx, e.ID); err != nil && !dataplane.IsNotFound(err) {
				return nil, fmt.Errorf("drop the kept configuration call %s %s of a deleted volume: %w", e.Method, e.Object, err)
			}
			ctrl.LoggerFrom(ctx).Info("dropped a kept configuration call of a deleted volume",
				"method", e.Method, "object", e.Object)
			continue
		}
		lines = append(lines, fmt.Sprintf("%s %s: %s (code %d)", e.Method, e.Object, e.Message, e.Code))
	}
	return lines, nil
}
