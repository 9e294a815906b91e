package framework

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rackcache/rackcache/controllers/dataplane"
)

var (
	dataplaneBuildOnce sync.Once
	dataplaneBinary    string
	dataplaneBuildErr  error
)

// DataplaneBinary builds rackcache-dataplane (cargo, debug profile) once per
// test process and returns its path. cargo does nothing when it is current.
func DataplaneBinary(t testing.TB) string {
	t.Helper()
	dataplaneBuildOnce.Do(func() {
		// A prebuilt binary (a worktree sharing one build) skips cargo.
		if bin := os.Getenv("RACKCACHE_DATAPLANE_BIN"); bin != "" {
			dataplaneBinary = bin
			return
		}
		if _, err := exec.LookPath("cargo"); err != nil {
			dataplaneBuildErr = fmt.Errorf("cargo is needed to build rackcache-dataplane: %w", err)
			return
		}
		dir := filepath.Join(RepoRoot(), "dataplane")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "cargo", "build", "--quiet", "-p", "rackcache-dataplane", "--bin", "rackcache-dataplane")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			dataplaneBuildErr = fmt.Errorf("cargo build rackcache-dataplane: %w\n%s", err, out)
			return
		}
		target := os.Getenv("CARGO_TARGET_DIR")
		if target == "" {
			target = filepath.Join(dir, "target")
		}
		dataplaneBinary = filepath.Join(target, "debug", "rackcache-dataplane")
	})
	if dataplaneBuildErr != nil {
		t.Fatalf("%v", dataplaneBuildErr)
	}
	return dataplaneBinary
}

// Dataplane is a running rackcache-dataplane process.
type Dataplane struct {
	// Client talks to its Unix socket.
	Client *dataplane.Client
	// Socket is the JSON-RPC Unix socket's path.
	Socket string
	// Log is the file its stdout and stderr go to.
	Log string
	cmd *exec.Cmd
}

// StartDataplane starts rackcache-dataplane with a JSON-RPC socket in a temp
// dir (plus extra arguments), waits until it answers, and stops it (SIGTERM,
// then SIGKILL after 10 s) when the test ends. Its log is printed when the
// test failed.
func StartDataplane(t testing.TB, args ...string) *Dataplane {
	t.Helper()
	bin := DataplaneBinary(t)
	// Unix socket paths are limited to 108 bytes: t.TempDir() can be longer.
	dir, err := os.MkdirTemp("", "rcdp-")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	sock := filepath.Join(dir, "rpc.sock")
	logPath := filepath.Join(dir, "dataplane.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("create dataplane log: %v", err)
	}
	cmd := exec.Command(bin, append([]string{"--rpc-socket", sock}, args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	_ = logFile.Close()
	pid := cmd.Process.Pid
	// Should this test process die first, the reaper stops the dataplane,
	// but only while the PID still names our binary.
	reap := fmt.Sprintf(`grep -qa rackcache-dataplane /proc/%d/cmdline 2>/dev/null && kill -9 %d; rm -rf %s`,
		pid, pid, shellQuote(dir))
	if err := startReaper(reap); err != nil {
		t.Fatalf("%v", err)
	}
	d := &Dataplane{Client: dataplane.NewUnixClient(sock), Socket: sock, Log: logPath, cmd: cmd}
	t.Cleanup(func() {
		d.Stop(t)
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("rackcache-dataplane log:\n%s", b)
			}
		}
		_ = os.RemoveAll(dir)
	})

	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := d.Client.Version(ctx)
		cancel()
		if err == nil {
			return d
		}
		if cmd.ProcessState != nil || !processAlive(pid) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("rackcache-dataplane exited at start:\n%s", b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("rackcache-dataplane did not answer on %s within 30 s: %v", sock, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop ends the process (SIGTERM: graceful, then SIGKILL) and waits for it.
// Calling it twice is harmless.
func (d *Dataplane) Stop(t testing.TB) {
	t.Helper()
	if d.cmd.ProcessState != nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		_ = d.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
		t.Errorf("rackcache-dataplane did not stop within 10 s of SIGTERM")
	}
}

// Call is Client.Call with a 30 s timeout that fails the test on error.
func (d *Dataplane) Call(t testing.TB, method string, params, result any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Client.Call(ctx, method, params, result); err != nil {
		t.Fatalf("%v", err)
	}
}

func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// A zombie (state Z) has exited.
	fields := strings.Fields(string(b))
	return len(fields) > 2 && fields[2] != "Z"
}

// GuestHostNQN is the host NQN the qemu guest's nvme-cli presents (fixed at
// build time in hack/guest/build.sh, recorded in the build's info file).
func GuestHostNQN(t testing.TB) string {
	t.Helper()
	BuildGuest(t)
	b, err := os.ReadFile(filepath.Join(RepoRoot(), "bin", "guest", "info"))
	if err != nil {
		t.Fatalf("read guest info: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "hostnqn="); ok {
			return v
		}
	}
	t.Fatalf("guest info has no hostnqn line")
	return ""
}

// DataplaneTLS is a CA and a server certificate it signed for 127.0.0.1
// and localhost, made for one test: what the operator would put in the
// dataplane's TLS Secret.
type DataplaneTLS struct {
	// CertFile and KeyFile are the server's PEM files, for --rpc-tls-cert
	// and --rpc-tls-key.
	CertFile, KeyFile string
	// CAPEM is the CA certificate; CAPool holds it.
	CAPEM  []byte
	CAPool *x509.CertPool
}

// Args are the dataplane flags that serve JSON-RPC on addr over TLS.
func (d *DataplaneTLS) Args(addr, tokenFile string) []string {
	return []string{"--rpc-listen", addr, "--rpc-token-file", tokenFile,
		"--rpc-tls-cert", d.CertFile, "--rpc-tls-key", d.KeyFile}
}

// NewDataplaneTLS writes a fresh CA and server certificate into a temp dir.
func NewDataplaneTLS(t testing.TB) *DataplaneTLS {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("CA key: %v", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "rackcache test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("CA certificate: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("parse CA certificate: %v", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("server key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "rackcache-dataplane"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatalf("server certificate: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("encode server key: %v", err)
	}
	d := &DataplaneTLS{
		CertFile: filepath.Join(dir, "tls.crt"),
		KeyFile:  filepath.Join(dir, "tls.key"),
		CAPEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		CAPool:   x509.NewCertPool(),
	}
	d.CAPool.AddCert(ca)
	if err := os.WriteFile(d.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return d
}

// Kill ends the process with SIGKILL (a crash: nothing is flushed or
// drained) and waits for it. Its temp dir and log stay until the test ends.
func (d *Dataplane) Kill(t testing.TB) {
	t.Helper()
	if d.cmd.ProcessState != nil {
		return
	}
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill -9 rackcache-dataplane: %v", err)
	}
	_ = d.cmd.Wait()
}
