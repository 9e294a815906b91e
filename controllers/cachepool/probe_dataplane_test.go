package cachepool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/controllers/dataplane"
	"github.com/rackcache/rackcache/controllers/servers"
	"github.com/rackcache/rackcache/test/framework"
)

// TestRenderedConfigStartsARealDataplane starts rackcache-dataplane with
// the ConfigMap's configuration (devices being sparse files) and reads it
// the way a pass does: the layout and parameters are the dataplane's, the
// cache bdevs appear, and capacity, allocation, volumes and IOPS follow
// what is created on it.
func TestRenderedConfigStartsARealDataplane(t *testing.T) {
	dir := t.TempDir()
	const deviceBytes = 256 << 20
	pool := testPool("real")
	limit := resource.MustParse("128Mi")
	pool.Spec.Devices = []rcv1.CacheDevice{
		{Path: filepath.Join(dir, "nvme0")},
		{Path: filepath.Join(dir, "nvme1"), Size: &limit},
	}
	for _, d := range pool.Spec.Devices {
		if err := os.WriteFile(d.Path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(d.Path, deviceBytes); err != nil {
			t.Fatal(err)
		}
	}
	config, err := renderDataplaneConfig(pool)
	if err != nil {
		t.Fatal(err)
	}
	configPath := filepath.Join(dir, ConfigKey)
	if err := os.WriteFile(configPath, config, 0o600); err != nil {
		t.Fatal(err)
	}
	// The DaemonSet's hostPath (DirectoryOrCreate) makes this directory.
	if err := os.Mkdir(filepath.Join(dir, "persist"), 0o700); err != nil {
		t.Fatal(err)
	}
	dp := framework.StartDataplane(t, "--config", configPath, "--config-persist", filepath.Join(dir, "persist", "config.json"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	bdevs, err := dp.Client.Bdevs(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cache0", "cache1"} {
		i := slices.IndexFunc(bdevs, func(b dataplane.Bdev) bool { return b.Name == name })
		if i < 0 {
			t.Fatalf("bdev %s not created from the configuration; bdevs: %+v", name, bdevs)
		}
		if bdevs[i].BlockSize != cacheBlockSize || bdevs[i].SizeBytes() != deviceBytes {
			t.Errorf("bdev %s: block size %d, %d bytes; want %d, %d", name, bdevs[i].BlockSize, bdevs[i].SizeBytes(), cacheBlockSize, deviceBytes)
		}
	}

	r := &Reconciler{}
	first := serverReading{}
	if err := r.readInto(ctx, dp.Client, pool, &first); err != nil {
		t.Fatalf("read the server: %v", err)
	}
	// cache0 whole (256 MiB) + cache1 capped at 128 MiB.
	if want := int64(deviceBytes + 128<<20); first.CapacityBytes != want || first.Version == "" || first.Volumes != 0 || len(first.MissingCacheBdevs) != 0 {
		t.Errorf("empty server read as %+v, want capacity %d, a version, no volume", first, want)
	}

	if _, err := dp.Client.CreateMallocBdev(ctx, "core0", 16384, 4096); err != nil {
		t.Fatal(err)
	}
	if _, err := dp.Client.CreateCachedBdev(ctx, dataplane.CachedBdevParams{Name: "vol0", CoreBdevName: "core0", CacheBdevName: "cache0", CacheSizeMiB: 32}); err != nil {
		t.Fatal(err)
	}
	second := serverReading{}
	if err := r.readInto(ctx, dp.Client, pool, &second); err != nil {
		t.Fatalf("read the server: %v", err)
	}
	devices, err := dp.Client.CacheDevices(ctx)
	if err != nil || len(devices) != 1 {
		t.Fatalf("cache devices %+v, %v; want cache0 only", devices, err)
	}
	wantCapacity := int64(devices[0].TotalMiB)*mib + 128<<20
	if second.CapacityBytes != wantCapacity || second.AllocatedBytes != 32*mib || second.Volumes != 1 || len(second.DegradedVolumes) != 0 {
		t.Errorf("server with one volume read as %+v, want capacity %d (formatted cache0 + cache1), allocated 32 MiB, 1 volume", second, wantCapacity)
	}
}

// TestIssuedCertificateServesARealDataplane starts rackcache-dataplane with
// the token and server certificate the reconciler issues, and calls it the
// way the operator does: over HTTPS, verifying against the pool's CA for
// the pool's TLS server name, presenting the token.
func TestIssuedCertificateServesARealDataplane(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, err := newCA("tls", now)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := newServerCert(ca, servers.TLSServerName("tls"), now)
	if err != nil {
		t.Fatal(err)
	}
	token := "an-rpc-token-of-enough-length-0123456789"
	files := map[string][]byte{"tls.crt": cert.CertPEM, "tls.key": cert.KeyPEM, "token": []byte(token)}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", framework.FreeLoopbackPort(t))
	framework.StartDataplane(t, "--rpc-listen", addr, "--rpc-token-file", filepath.Join(dir, "token"),
		"--rpc-tls-cert", filepath.Join(dir, "tls.crt"), "--rpc-tls-key", filepath.Join(dir, "tls.key"))

	roots, err := dataplane.CAPoolFromPEM(ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	good := dataplane.NewHTTPClient("https://"+addr+"/", token, dataplane.WithCAPool(roots), dataplane.WithServerName(servers.TLSServerName("tls")))
	if _, err := good.Version(ctx); err != nil {
		t.Fatalf("call over TLS with the pool's CA and name: %v", err)
	}
	otherPool := dataplane.NewHTTPClient("https://"+addr+"/", token, dataplane.WithCAPool(roots), dataplane.WithServerName(servers.TLSServerName("other")))
	if _, err := otherPool.Version(ctx); err == nil {
		t.Error("the certificate was accepted for another pool's name")
	}
}
