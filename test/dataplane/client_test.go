package dataplane_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/test/framework"
)

// tlsClient starts a dataplane with a token and TLS and returns the
// operator's kind of client for it (HTTPS, verified against the test's CA).
func tlsClient(t *testing.T) (*framework.Dataplane, *dataplane.Client) {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	const token = "typed-client-token-32-characters"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := framework.FreeLoopbackPort(t)
	pki := framework.NewDataplaneTLS(t)
	dp := framework.StartDataplane(t, pki.Args(fmt.Sprintf("127.0.0.1:%d", port), tokenFile)...)
	pool, err := dataplane.CAPoolFromPEM(pki.CAPEM)
	if err != nil {
		t.Fatal(err)
	}
	return dp, dataplane.NewHTTPClient(fmt.Sprintf("https://127.0.0.1:%d/", port), token, dataplane.WithCAPool(pool))
}

// must fails the test when err is not nil.
func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// wantErr fails the test unless err matches is.
func wantErr(t *testing.T, what string, err error, is func(error) bool, want string) {
	t.Helper()
	if !is(err) {
		t.Errorf("%s: err = %v, want %s", what, err, want)
	}
}

func isInternal(err error) bool { return dataplane.IsCode(err, dataplane.CodeInternalError) }

// Every typed bdev, cached-bdev, nvmf and framework method against a real
// dataplane over HTTPS, with the error each refusal maps to.
func TestTypedClient(t *testing.T) {
	_, c := tlsClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	v, err := c.Version(ctx)
	must(t, "Version", err)
	if !strings.Contains(v.Version, "rackcache-dataplane") || v.Fields.Major == 0 {
		t.Errorf("Version = %+v, want rackcache-dataplane with an SPDK major", v)
	}
	methods, err := c.Methods(ctx)
	must(t, "Methods", err)
	for _, m := range []string{"bdev_rbd_create", "bdev_adacache_create", "nvmf_subsystem_add_ns", "save_config"} {
		if !slices.Contains(methods, m) {
			t.Errorf("Methods lacks %s: %v", m, methods)
		}
	}
	wantErr(t, "an unknown method", c.Call(ctx, "no_such_method", nil, nil), dataplane.IsMethodNotFound, "method not found")

	// bdevs
	name, err := c.CreateMallocBdev(ctx, "Core0", 16384, 512)
	must(t, "CreateMallocBdev Core0", err)
	if name != "Core0" {
		t.Errorf("CreateMallocBdev = %q, want Core0", name)
	}
	_, err = c.CreateMallocBdev(ctx, "Cache0", 131072, 512)
	must(t, "CreateMallocBdev Cache0", err)
	_, err = c.CreateMallocBdev(ctx, "Core0", 16384, 512)
	wantErr(t, "a second bdev Core0", err, dataplane.IsExists, "IsExists")
	_, err = c.CreateMallocBdev(ctx, "Bad", 16384, 777)
	wantErr(t, "block size 777", err, dataplane.IsInvalid, "IsInvalid")
	bdevs, err := c.Bdevs(ctx, "Core0")
	must(t, "Bdevs Core0", err)
	if len(bdevs) != 1 || bdevs[0].SizeBytes() != 16384*512 || bdevs[0].UUID == "" || bdevs[0].Claimed {
		t.Errorf("Bdevs(Core0) = %+v, want one unclaimed 8 MiB bdev with a UUID", bdevs)
	}
	all, err := c.Bdevs(ctx, "")
	must(t, "Bdevs", err)
	if len(all) != 2 {
		t.Errorf("Bdevs() = %d bdevs, want 2", len(all))
	}
	_, err = c.Bdevs(ctx, "Nope")
	wantErr(t, "Bdevs of an unknown bdev", err, dataplane.IsNotFound, "IsNotFound")
	if err := c.DeleteMallocBdev(ctx, "Nope"); !dataplane.IsNotFound(err) {
		t.Errorf("DeleteMallocBdev of an unknown bdev: err = %v, want IsNotFound", err)
	}

	// a cached bdev over them
	cached, err := c.CreateCachedBdev(ctx, dataplane.CachedBdevParams{
		Name: "C0", CoreBdevName: "Core0", CacheBdevName: "Cache0", CacheSizeMiB: 8, WriteMode: dataplane.WriteThrough,
	})
	must(t, "CreateCachedBdev", err)
	wantErr(t, "deleting the core bdev of a cached bdev", c.DeleteMallocBdev(ctx, "Core0"), dataplane.IsBusy, "IsBusy")
	_, err = c.CreateCachedBdev(ctx, dataplane.CachedBdevParams{Name: "C1", CoreBdevName: "Core0", CacheBdevName: "Cache0", CacheSizeMiB: 8})
	wantErr(t, "a second cached bdev on a claimed core", err, func(err error) bool { return err != nil }, "an error")
	list, err := c.CachedBdevs(ctx, cached)
	must(t, "CachedBdevs", err)
	if len(list) != 1 || list[0].CoreBdevName != "Core0" || list[0].WriteMode != dataplane.WriteThrough {
		t.Errorf("CachedBdevs = %+v, want C0 over Core0 in write-through", list)
	}
	_, err = c.CachedBdevs(ctx, "Nope")
	wantErr(t, "CachedBdevs of an unknown bdev", err, dataplane.IsNotFound, "IsNotFound")
	devs, err := c.CacheDevices(ctx)
	must(t, "CacheDevices", err)
	if len(devs) != 1 || devs[0].CacheBdevName != "Cache0" || devs[0].FreeMiB >= devs[0].TotalMiB ||
		len(devs[0].Volumes) != 1 || !devs[0].Volumes[0].Attached || devs[0].Volumes[0].CacheSizeMiB != 8 {
		t.Errorf("CacheDevices = %+v, want Cache0 holding C0 (8 MiB, attached)", devs)
	}
	must(t, "SetCachedBdevPolicy", c.SetCachedBdevPolicy(ctx, cached, dataplane.PolicyChange{SeqCutoff: &dataplane.SeqCutoff{Policy: "never"}}))
	wantErr(t, "SetCachedBdevPolicy with nothing", c.SetCachedBdevPolicy(ctx, cached, dataplane.PolicyChange{}), dataplane.IsInvalid, "IsInvalid")
	must(t, "SetCachedBdevMode", c.SetCachedBdevMode(ctx, cached, dataplane.WriteBack))
	must(t, "ResizeCachedBdev", c.ResizeCachedBdev(ctx, cached, 16))
	must(t, "FlushCachedBdev", c.FlushCachedBdev(ctx, cached))
	fs, err := c.CachedBdevFlushStatus(ctx, cached)
	must(t, "CachedBdevFlushStatus", err)
	if fs.Error != nil {
		t.Errorf("CachedBdevFlushStatus = %+v, want no error", fs)
	}
	must(t, "ResetCachedBdevStats", c.ResetCachedBdevStats(ctx, cached))
	cs, err := c.CachedBdevStats(ctx, cached)
	must(t, "CachedBdevStats", err)
	if cs.Name != cached || cs.WriteMode != dataplane.WriteBack || cs.Usage.CapacityBytes != 16<<20 || len(cs.Raw) == 0 {
		t.Errorf("CachedBdevStats = %+v, want C0 in write-back with 16 MiB", cs)
	}
	_, err = c.CachedBdevStats(ctx, "Nope")
	wantErr(t, "CachedBdevStats of an unknown bdev", err, dataplane.IsNotFound, "IsNotFound")

	// nvmf
	must(t, "CreateTransport", c.CreateTransport(ctx, dataplane.Transport{MaxQueueDepth: 128}))
	wantErr(t, "a second transport", c.CreateTransport(ctx, dataplane.Transport{}), isInternal, "code -32603 (as SPDK)")
	const nqn = "nqn.2016-06.io.rackcache:typed-client"
	must(t, "CreateSubsystem", c.CreateSubsystem(ctx, dataplane.SubsystemParams{NQN: nqn, SerialNumber: "RC0001", MaxNamespaces: 4}))
	wantErr(t, "a second subsystem", c.CreateSubsystem(ctx, dataplane.SubsystemParams{NQN: nqn}), isInternal, "code -32603 (as SPDK)")
	const uuid = "6f1b2a3c-0d4e-4f50-8a61-72839a4b5c6d"
	nsid, err := c.AddNamespace(ctx, nqn, dataplane.Namespace{BdevName: cached, UUID: uuid})
	must(t, "AddNamespace", err)
	if nsid != 1 {
		t.Errorf("AddNamespace = nsid %d, want 1", nsid)
	}
	_, err = c.AddNamespace(ctx, nqn, dataplane.Namespace{BdevName: "Nope"})
	wantErr(t, "a namespace on an unknown bdev", err, func(err error) bool { return err != nil }, "an error")
	port := framework.FreeLoopbackPort(t)
	listen := dataplane.ListenAddress{TrType: "TCP", AdrFam: "IPv4", TrAddr: "127.0.0.1", TrSvcID: fmt.Sprint(port),
		Advertised: &dataplane.Advertised{TrAddr: "10.9.8.7"}}
	must(t, "AddListener", c.AddListener(ctx, nqn, listen, ""))
	wantErr(t, "a listener with a name for an address",
		c.AddListener(ctx, nqn, dataplane.ListenAddress{TrType: "TCP", TrAddr: "localhost", TrSvcID: "1"}, ""), dataplane.IsInvalid, "IsInvalid")
	const host = "nqn.2014-08.org.nvmexpress:uuid:0b7c2a64-0a8e-4d57-9a9e-3e5b5f0c1d2e"
	must(t, "AddHost", c.AddHost(ctx, nqn, host))

	subs, err := c.Subsystems(ctx, nqn)
	must(t, "Subsystems", err)
	if len(subs) != 1 {
		t.Fatalf("Subsystems(%s) = %+v, want one", nqn, subs)
	}
	s := subs[0]
	if s.SerialNumber != "RC0001" || s.AllowAnyHost || len(s.Hosts) != 1 || s.Hosts[0].NQN != host ||
		len(s.Namespaces) != 1 || s.Namespaces[0].UUID != uuid || s.Namespaces[0].BdevName != "C0" ||
		len(s.ListenAddresses) != 1 || s.ListenAddresses[0].TrSvcID != fmt.Sprint(port) ||
		s.ListenAddresses[0].Advertised == nil || s.ListenAddresses[0].Advertised.TrAddr != "10.9.8.7" {
		t.Errorf("Subsystems(%s) = %+v, want serial, one host, namespace C0 with its UUID, the listener advertising 10.9.8.7", nqn, s)
	}
	// ANA: a second subsystem reporting states on the same listener.
	const anaNQN = "nqn.2016-06.io.rackcache:typed-client-ana"
	must(t, "CreateSubsystem with ANA", c.CreateSubsystem(ctx, dataplane.SubsystemParams{NQN: anaNQN, MaxNamespaces: 2, ANAReporting: true}))
	wantErr(t, "SetANAState without ANA reporting",
		c.SetANAState(ctx, nqn, listen, dataplane.ANAInaccessible, 0), dataplane.IsInvalid, "IsInvalid")
	// Added inaccessible (a mirror's path), then group 1 made optimized.
	must(t, "AddListener with ANA", c.AddListener(ctx, anaNQN, listen, dataplane.ANAInaccessible))
	ls, err := c.Listeners(ctx, anaNQN)
	must(t, "Listeners", err)
	if len(ls) != 1 || len(ls[0].ANAStates) != 2 ||
		ls[0].ANAStates[0].State != dataplane.ANAInaccessible || ls[0].ANAStates[1].State != dataplane.ANAInaccessible {
		t.Errorf("Listeners(%s) after adding it inaccessible = %+v, want both groups inaccessible", anaNQN, ls)
	}
	anaSubs, err := c.Subsystems(ctx, anaNQN)
	must(t, "Subsystems with ANA", err)
	if len(anaSubs) != 1 || !anaSubs[0].ANAReporting {
		t.Errorf("Subsystems(%s) = %+v, want ana_reporting", anaNQN, anaSubs)
	}
	must(t, "SetANAState", c.SetANAState(ctx, anaNQN, listen, dataplane.ANAOptimized, 1))
	ls, err = c.Listeners(ctx, anaNQN)
	must(t, "Listeners", err)
	if len(ls) != 1 || ls[0].Address.TrSvcID != fmt.Sprint(port) || len(ls[0].ANAStates) != 2 ||
		ls[0].ANAStates[0].State != dataplane.ANAOptimized || ls[0].ANAStates[1].State != dataplane.ANAInaccessible {
		t.Errorf("Listeners(%s) = %+v, want group 1 optimized, group 2 inaccessible", anaNQN, ls)
	}
	must(t, "DeleteSubsystem with ANA", c.DeleteSubsystem(ctx, anaNQN))
	all2, err := c.Subsystems(ctx, "")
	must(t, "Subsystems all", err)
	if len(all2) != 2 || all2[0].Subtype != "Discovery" {
		t.Errorf("Subsystems() = %+v, want discovery then ours", all2)
	}
	_, err = c.Subsystems(ctx, "nqn.2016-06.io.rackcache:nope")
	wantErr(t, "Subsystems of an unknown subsystem", err, dataplane.IsInvalid, "IsInvalid")
	ctrls, err := c.Controllers(ctx, nqn)
	must(t, "Controllers", err)
	if len(ctrls) != 0 {
		t.Errorf("Controllers = %+v, want none (nothing connected)", ctrls)
	}
	must(t, "AllowAnyHost", c.AllowAnyHost(ctx, nqn, true))
	must(t, "RemoveHost", c.RemoveHost(ctx, nqn, host))
	subs, err = c.Subsystems(ctx, nqn)
	must(t, "Subsystems", err)
	if !subs[0].AllowAnyHost || len(subs[0].Hosts) != 0 {
		t.Errorf("after AllowAnyHost and RemoveHost: %+v", subs[0])
	}

	st, err := c.IOStat(ctx, "Core0", "C0")
	must(t, "IOStat", err)
	if len(st.Bdevs) != 2 || st.Bdevs[0].Name != "Core0" || st.TickRate == 0 {
		t.Errorf("IOStat = %+v, want Core0 and C0", st)
	}
	_, err = c.IOStat(ctx, "Nope")
	wantErr(t, "IOStat of an unknown bdev", err, dataplane.IsNotFound, "IsNotFound")

	cfg, err := c.SaveConfig(ctx)
	must(t, "SaveConfig", err)
	var calls []string
	for _, sub := range cfg.Subsystems {
		for _, call := range sub.Config {
			calls = append(calls, call.Method)
		}
	}
	for _, m := range []string{"bdev_malloc_create", "bdev_adacache_create", "nvmf_create_transport", "nvmf_create_subsystem", "nvmf_subsystem_add_ns", "nvmf_subsystem_add_listener"} {
		if !slices.Contains(calls, m) {
			t.Errorf("SaveConfig lacks %s: %v", m, calls)
		}
	}

	// teardown, in the order the operator's finalizer uses
	must(t, "RemoveListener", c.RemoveListener(ctx, nqn, listen))
	must(t, "RemoveNamespace", c.RemoveNamespace(ctx, nqn, nsid))
	wantErr(t, "removing it again", c.RemoveNamespace(ctx, nqn, nsid), dataplane.IsInvalid, "IsInvalid")
	must(t, "DeleteSubsystem", c.DeleteSubsystem(ctx, nqn))
	wantErr(t, "deleting it again", c.DeleteSubsystem(ctx, nqn), dataplane.IsInvalid, "IsInvalid")
	wantErr(t, "AddHost to a deleted subsystem", c.AddHost(ctx, nqn, host), dataplane.IsInvalid, "IsInvalid")
	must(t, "DeleteCachedBdev", c.DeleteCachedBdev(ctx, cached, false))
	must(t, "DeleteMallocBdev", c.DeleteMallocBdev(ctx, "Core0"))
}

// A call whose context has no deadline ends after the client's timeout,
// over either transport, even when the server never answers.
func TestTypedClientTimeout(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "mute.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Accepted connections are held open, never answered.
	held := make(chan net.Conn, 16)
	for _, l := range []net.Listener{ul, tl} {
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				held <- conn
			}
		}()
	}
	t.Cleanup(func() {
		_ = ul.Close()
		_ = tl.Close()
		for len(held) > 0 {
			_ = (<-held).Close()
		}
	})
	clients := map[string]*dataplane.Client{
		"unix": dataplane.NewUnixClient(sock, dataplane.WithTimeout(200*time.Millisecond)),
		"http": dataplane.NewHTTPClient("http://"+tl.Addr().String()+"/", "tok", dataplane.WithTimeout(200*time.Millisecond)),
	}
	for kind, c := range clients {
		_, err := c.Version(context.Background())
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: a mute server: err = %v, want the deadline exceeded", kind, err)
		}
	}
}

// Cluster registration and rbd bdevs against the real Ceph; the cephx key
// shows in no error, no formatted or logged request, and not in the
// dataplane's log.
func TestTypedClientRbd(t *testing.T) {
	ceph := framework.StartCeph(t)
	dp, c := tlsClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	newRbdImage(t, ceph, "typed0", 16)

	p := dataplane.RbdCluster{Name: "ceph0", UserID: ceph.User, MonHost: ceph.MonHost, Key: dataplane.Secret(ceph.Key)}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("registering", "cluster", p, "key", p.Key)
	for _, s := range []string{fmt.Sprintf("%v %+v %#v %s %q", p, p, p, p.Key, p.Key), logged.String()} {
		if strings.Contains(s, ceph.Key) {
			t.Errorf("a formatted or logged request shows the key: %s", s)
		}
	}

	name, err := c.RegisterRbdCluster(ctx, p)
	must(t, "RegisterRbdCluster", err)
	if name != "ceph0" {
		t.Errorf("RegisterRbdCluster = %q, want ceph0", name)
	}
	_, err = c.RegisterRbdCluster(ctx, p)
	wantErr(t, "a second cluster ceph0", err, dataplane.IsExists, "IsExists")
	// A user Ceph does not know: refused, and the key sent is not echoed.
	_, err = c.RegisterRbdCluster(ctx, dataplane.RbdCluster{Name: "ceph1", MonHost: ceph.MonHost, Key: dataplane.Secret(ceph.Key), UserID: "nobody"})
	if err == nil {
		t.Errorf("registering a cluster as an unknown user succeeded")
	} else if strings.Contains(err.Error(), ceph.Key) {
		t.Errorf("the error shows the key: %v", err)
	}

	_, err = c.CreateRbdBdev(ctx, dataplane.RbdBdev{Name: "R0", ClusterName: "nope", PoolName: ceph.Pool, RbdName: "typed0", BlockSize: 512})
	wantErr(t, "an rbd bdev of an unknown cluster", err, dataplane.IsNotFound, "IsNotFound")
	bdev, err := c.CreateRbdBdev(ctx, dataplane.RbdBdev{Name: "R0", ClusterName: "ceph0", PoolName: ceph.Pool, RbdName: "typed0", BlockSize: 512})
	must(t, "CreateRbdBdev", err)
	bdevs, err := c.Bdevs(ctx, bdev)
	must(t, "Bdevs", err)
	if len(bdevs) != 1 || bdevs[0].SizeBytes() != 16<<20 {
		t.Errorf("Bdevs(R0) = %+v, want one 16 MiB bdev", bdevs)
	}
	_, err = c.CreateRbdBdev(ctx, dataplane.RbdBdev{Name: "R0", ClusterName: "ceph0", PoolName: ceph.Pool, RbdName: "typed0", BlockSize: 512})
	wantErr(t, "a second bdev R0", err, dataplane.IsExists, "IsExists")
	wantErr(t, "unregistering a cluster in use", c.UnregisterRbdCluster(ctx, "ceph0"), dataplane.IsBusy, "IsBusy")
	must(t, "DeleteRbdBdev", c.DeleteRbdBdev(ctx, bdev))
	wantErr(t, "deleting it again", c.DeleteRbdBdev(ctx, bdev), dataplane.IsNotFound, "IsNotFound")
	must(t, "UnregisterRbdCluster", c.UnregisterRbdCluster(ctx, "ceph0"))
	wantErr(t, "unregistering it again", c.UnregisterRbdCluster(ctx, "ceph0"), dataplane.IsNotFound, "IsNotFound")

	dp.Stop(t)
	log, err := os.ReadFile(dp.Log)
	must(t, "read the dataplane's log", err)
	if bytes.Contains(log, []byte(ceph.Key)) {
		t.Errorf("the dataplane's log %s shows the cephx key", dp.Log)
	}
}
