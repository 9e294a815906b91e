package cachedvolume

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/ceph"
	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/controllers/hostkeys"
	"github.com/rackcache/rackcache/controllers/servers"
	"github.com/rackcache/rackcache/test/framework"
)

// loadgenHostNQN is the host NQN rackcache-loadgen connects as by default.
const loadgenHostNQN = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-72616b6c6f61"

// TestApplyOnRealDataplane drives Apply and Teardown against a real
// dataplane process and a real Ceph cluster: creation, idempotence, a
// kill -9 and restart without the persisted configuration (the cache is
// re-attached with load, dirty data intact), host and policy changes, a
// grown volume, leaving write-back through a flush, and teardown.
func TestApplyOnRealDataplane(t *testing.T) {
	cluster := framework.StartCeph(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	image := "cv-apply"
	if out, err := cluster.Admin(ctx, "rbd", "create", "--size", "64M", cluster.Pool+"/"+image); err != nil {
		t.Fatalf("create rbd image: %v\n%s", err, out)
	}
	cacheFile := filepath.Join(t.TempDir(), "cache0.img")
	if err := os.WriteFile(cacheFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(cacheFile, 128<<20); err != nil {
		t.Fatal(err)
	}
	port := framework.FreeLoopbackPort(t)

	vol := &rcv1.CachedVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "apply-test", UID: "0b6d7c1e-1111-4222-8333-444455556666"},
		Spec: rcv1.CachedVolumeSpec{
			PoolName:  "fast",
			RBD:       rcv1.RBDImage{Pool: cluster.Pool, Image: image},
			Size:      resource.MustParse("64Mi"),
			CacheSize: "16Mi",
			WriteMode: rcv1.WriteBack,
			Policies: rcv1.CachePolicy{
				// No cleaning: what the load writes stays dirty.
				Cleaning:  &rcv1.Cleaning{Policy: rcv1.CleaningNop},
				SeqCutoff: &rcv1.SeqCutoff{Policy: rcv1.SeqCutoffNever},
			},
			AllowedHosts: []string{loadgenHostNQN},
		},
	}
	pool := &rcv1.CachePool{
		ObjectMeta: metav1.ObjectMeta{Name: "fast"},
		Spec: rcv1.CachePoolSpec{
			Devices:        []rcv1.CacheDevice{{Path: cacheFile}},
			BlockSizesKiB:  []rcv1.BlockSizeKiB{32, 64},
			AllocationMode: rcv1.Adaptive,
			WriteMode:      rcv1.WriteThrough,
			Port:           int32(port),
		},
	}
	backend := &ceph.Backend{Monitors: []string{cluster.MonHost}, UserID: cluster.User, Key: dataplane.Secret(cluster.Key)}
	size, err := ResolveCacheSize(&vol.Spec)
	if err != nil {
		t.Fatal(err)
	}
	d := DesiredState(vol, pool, backend, "127.0.0.1", size)

	dp := startServer(t, cacheFile, cluster)
	res := mustApply(ctx, t, dp.Client, d)
	for _, want := range []string{"transport", "cluster " + d.Cluster.Name, "rbd bdev " + d.Rbd.Name, "cached bdev " + d.Cached.Name, "subsystem " + d.Subsystem.NQN, "namespace", "listener"} {
		if !slices.Contains(res.Created, want) {
			t.Errorf("first apply created %v, missing %q", res.Created, want)
		}
	}
	if res.Loaded || res.WriteMode != dataplane.WriteBack {
		t.Errorf("first apply: loaded %v (want false), write mode %q (want wb)", res.Loaded, res.WriteMode)
	}
	checkSubsystem(ctx, t, dp.Client, d)

	if again := mustApply(ctx, t, dp.Client, d); len(again.Created)+len(again.Changed) > 0 {
		t.Errorf("second apply changed things: created %v, changed %v", again.Created, again.Changed)
	}

	if err := runLoad(t, port, d.Subsystem.NQN); err != nil {
		t.Fatalf("write load as an allowed host: %v", err)
	}
	before := dirtyBytes(ctx, t, dp.Client, d.Cached.Name)
	if before == 0 {
		t.Fatalf("no dirty data after the write load in write-back mode")
	}

	// A crash, and the device holding the dirty cache does not come back:
	// a blank device stands in. The volume ran write-back here, so apply
	// must refuse to create a fresh cache (hosts would read stale data
	// from Ceph) and create nothing.
	dp.Kill(t)
	blank := filepath.Join(t.TempDir(), "blank.img")
	if err := os.WriteFile(blank, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(blank, 128<<20); err != nil {
		t.Fatal(err)
	}
	dp = startServer(t, blank, cluster)
	d.MustLoad = true
	if _, err := Apply(ctx, dp.Client, d); err == nil || !strings.Contains(err.Error(), "not creating a fresh cache") {
		t.Errorf("apply with the dirty cache's device missing: err = %v, want a refusal to create a fresh cache", err)
	}
	if cached, err := dp.Client.CachedBdevs(ctx, ""); err != nil || len(cached) != 0 {
		t.Errorf("cached bdevs after the refusal: %+v, %v; want none", cached, err)
	}
	dp.Kill(t)

	// A restart without the persisted configuration: only the cache device
	// comes back (as the pool's start-up config makes it).
	dp = startServer(t, cacheFile, cluster)
	devs, err := dp.Client.CacheDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 0 {
		t.Fatalf("a fresh dataplane lists opened cache devices: %+v", devs)
	}
	res = mustApply(ctx, t, dp.Client, d)
	if !res.Loaded || !slices.Contains(res.Created, "cached bdev "+d.Cached.Name) {
		t.Errorf("apply after restart: loaded %v (want true), created %v", res.Loaded, res.Created)
	}
	checkSubsystem(ctx, t, dp.Client, d)
	if after := dirtyBytes(ctx, t, dp.Client, d.Cached.Name); after == 0 {
		t.Errorf("dirty data lost over the restart: %d bytes before, 0 after", before)
	}
	devs, err = dp.Client.CacheDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 || deviceHolding(devs, d.Cached.Name) != servers.CacheBdevName(0) {
		t.Errorf("cache devices after re-attach: %+v", devs)
	}

	// Host set and policy changes apply in place, once.
	other := "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-555566667777"
	d.Hosts = []string{other}
	d.Cached.Eviction = "lazy"
	res = mustApply(ctx, t, dp.Client, d)
	if !slices.Contains(res.Changed, "removed host "+loadgenHostNQN) || !slices.Contains(res.Changed, "added host "+other) ||
		!slices.Contains(res.Changed, "policy eviction") {
		t.Errorf("changes applied: %v", res.Changed)
	}
	checkSubsystem(ctx, t, dp.Client, d)
	if again := mustApply(ctx, t, dp.Client, d); len(again.Created)+len(again.Changed) > 0 {
		t.Errorf("apply after the changes changed things again: created %v, changed %v", again.Created, again.Changed)
	}
	if err := runLoad(t, port, d.Subsystem.NQN); err == nil {
		t.Errorf("a host removed from the allowed hosts could still connect")
	}

	// A grown volume: the image, the cached bdev and the namespace grow,
	// once; Ceph's own view of the image says so.
	d.SizeBytes = 96 << 20
	res = mustApply(ctx, t, dp.Client, d)
	if !slices.Contains(res.Changed, "volume size 96 MiB") {
		t.Errorf("growing the volume changed %v", res.Changed)
	}
	if out, err := cluster.Admin(ctx, "rbd", "info", "--format", "json", cluster.Pool+"/"+image); err != nil || !strings.Contains(out, `"size":100663296`) {
		t.Errorf("rbd info after growing: %v\n%s", err, out)
	}
	if b, err := dp.Client.Bdevs(ctx, d.Cached.Name); err != nil || len(b) != 1 || b[0].SizeBytes() != 96<<20 {
		t.Errorf("cached bdev after growing: %+v, %v", b, err)
	}
	if again := mustApply(ctx, t, dp.Client, d); len(again.Created)+len(again.Changed) > 0 {
		t.Errorf("apply after growing changed things again: created %v, changed %v", again.Created, again.Changed)
	}

	// Leaving write-back flushes first, pass by pass, then switches.
	d.Cached.WriteMode = dataplane.WriteThrough
	flushed := false
	deadline := time.Now().Add(3 * time.Minute)
	for {
		res = mustApply(ctx, t, dp.Client, d)
		if res.Flushing == nil {
			break
		}
		flushed = true
		if time.Now().After(deadline) {
			t.Fatalf("flush before leaving write-back did not finish: %+v", res.Flushing)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !flushed || res.WriteMode != dataplane.WriteThrough {
		t.Errorf("leaving write-back: flushed %v (want true), write mode %q (want wt)", flushed, res.WriteMode)
	}
	if n := dirtyBytes(ctx, t, dp.Client, d.Cached.Name); n != 0 {
		t.Errorf("%d dirty bytes after the switch to write-through", n)
	}

	// Back to write-back with dirty data, for teardown to flush.
	d.Hosts, d.Cached.WriteMode = []string{loadgenHostNQN}, dataplane.WriteBack
	mustApply(ctx, t, dp.Client, d)
	if err := runLoad(t, port, d.Subsystem.NQN); err != nil {
		t.Fatalf("write load: %v", err)
	}
	if dirtyBytes(ctx, t, dp.Client, d.Cached.Name) == 0 {
		t.Fatalf("no dirty data before teardown")
	}

	// Teardown: the dirty data is flushed over passes, then everything of
	// the volume goes; a second teardown is a no-op.
	sawFlush := false
	for i := 0; ; i++ {
		tr, err := Teardown(ctx, dp.Client, vol.Name, d.Cluster.Name, nil)
		if err != nil {
			t.Fatalf("teardown: %v", err)
		}
		if tr.Done {
			break
		}
		sawFlush = sawFlush || tr.Flush != nil
		if i > 600 {
			t.Fatalf("teardown did not finish: %+v", tr.Flush)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !sawFlush {
		t.Errorf("teardown of a volume with dirty data did not flush")
	}
	if sub, err := lookupSubsystem(ctx, dp.Client, d.Subsystem.NQN); err != nil || sub != nil {
		t.Errorf("subsystem after teardown: %+v, %v", sub, err)
	}
	if cb, err := lookupCachedBdev(ctx, dp.Client, d.Cached.Name); err != nil || cb != nil {
		t.Errorf("cached bdev after teardown: %+v, %v", cb, err)
	}
	if _, err := dp.Client.Bdevs(ctx, d.Rbd.Name); !dataplane.IsNotFound(err) {
		t.Errorf("rbd bdev after teardown: %v (want not found)", err)
	}
	if tr, err := Teardown(ctx, dp.Client, vol.Name, d.Cluster.Name, nil); err != nil || !tr.Done {
		t.Errorf("second teardown: %+v, %v", tr, err)
	}
}

// startServer starts a dataplane with the pool's cache device on file and
// the Ceph user's keyring (as the pool's Secret mounts it).
func startServer(t *testing.T, file string, cluster *framework.Ceph) *framework.Dataplane {
	t.Helper()
	dp := framework.StartDataplane(t, "--ceph-keyring", cluster.UserKeyring(t))
	dp.Call(t, "bdev_aio_create", map[string]any{"name": servers.CacheBdevName(0), "filename": file, "block_size": 4096}, nil)
	return dp
}

func mustApply(ctx context.Context, t *testing.T, c *dataplane.Client, d Desired) ApplyResult {
	t.Helper()
	res, err := Apply(ctx, c, d)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return res
}

// checkSubsystem compares the dataplane's subsystem with d.
func checkSubsystem(ctx context.Context, t *testing.T, c *dataplane.Client, d Desired) {
	t.Helper()
	sub, err := lookupSubsystem(ctx, c, d.Subsystem.NQN)
	if err != nil || sub == nil {
		t.Fatalf("subsystem %s: %+v, %v", d.Subsystem.NQN, sub, err)
	}
	var hosts []string
	for _, h := range sub.Hosts {
		hosts = append(hosts, h.NQN)
	}
	slices.Sort(hosts)
	if sub.AllowAnyHost || !slices.Equal(hosts, d.Hosts) {
		t.Errorf("subsystem hosts %v allow_any_host %v, want %v and false", hosts, sub.AllowAnyHost, d.Hosts)
	}
	if len(sub.Namespaces) != 1 || sub.Namespaces[0].BdevName != d.Namespace.BdevName ||
		!strings.EqualFold(sub.Namespaces[0].UUID, d.Namespace.UUID) {
		t.Errorf("namespaces %+v, want one on %s with UUID %s", sub.Namespaces, d.Namespace.BdevName, d.Namespace.UUID)
	}
	if len(sub.ListenAddresses) != 1 || !sameListener(sub.ListenAddresses[0], d.Listener) {
		t.Errorf("listeners %+v, want %+v", sub.ListenAddresses, d.Listener)
	}
	if sub.SerialNumber != d.Subsystem.SerialNumber || sub.ModelNumber != d.Subsystem.ModelNumber {
		t.Errorf("serial %q model %q, want %q %q", sub.SerialNumber, sub.ModelNumber, d.Subsystem.SerialNumber, d.Subsystem.ModelNumber)
	}
}

func dirtyBytes(ctx context.Context, t *testing.T, c *dataplane.Client, name string) uint64 {
	t.Helper()
	st, err := c.CachedBdevStats(ctx, name)
	if err != nil {
		t.Fatalf("stats of %s: %v", name, err)
	}
	return st.DirtyBytes
}

// runLoad writes random 4 KiB blocks for a second through rackcache-loadgen
// (the repository's NVMe/TCP host), connecting as loadgenHostNQN.
func runLoad(t *testing.T, port int, nqn string, keys ...hostkeys.Pair) error {
	t.Helper()
	return runLoadAt(t, "127.0.0.1", port, nqn, keys...)
}

// runLoadAt writes for a second through the portal at addr:port.
func runLoadAt(t *testing.T, addr string, port int, nqn string, keys ...hostkeys.Pair) error {
	t.Helper()
	bin := filepath.Join(filepath.Dir(framework.DataplaneBinary(t)), "rackcache-loadgen")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("rackcache-loadgen beside the dataplane binary: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := []string{"--addr", net.JoinHostPort(addr, strconv.Itoa(port)), "--nqn", nqn,
		"--pattern", "randwrite", "--qd", "8", "--seconds", "1"}
	// With keys: the host authenticates (and checks the controller).
	for _, k := range keys {
		dir := t.TempDir()
		for flag, secret := range map[string]string{"--dhchap-key-file": k.Host, "--dhchap-ctrl-key-file": k.Ctrl} {
			path := filepath.Join(dir, strings.TrimPrefix(flag, "--"))
			if err := os.WriteFile(path, []byte(secret), 0o600); err != nil {
				t.Fatal(err)
			}
			args = append(args, flag, path)
		}
	}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	t.Logf("loadgen: %v\n%s", err, out)
	return err
}
