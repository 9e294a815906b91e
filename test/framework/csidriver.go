package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

var (
	csiBuildMu sync.Mutex
	csiBuilt   = map[bool]string{}
)

// CSIBinary builds rackcache-csi once per test process: static (no cgo,
// so no librbd: the node plugin, for the qemu guest) or with cgo (the
// controller, which manages RBD images).
func CSIBinary(t testing.TB, static bool) string {
	t.Helper()
	csiBuildMu.Lock()
	defer csiBuildMu.Unlock()
	if bin, ok := csiBuilt[static]; ok {
		return bin
	}
	dir, err := os.MkdirTemp("", "rackcache-csi-bin-")
	if err != nil {
		t.Fatal(err)
	}
	// Removed with the process's other temp files by the OS, not by this
	// test's clean-up: other tests of the process share the binary.
	bin := filepath.Join(dir, "rackcache-csi")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/rackcache-csi")
	cmd.Dir = RepoRoot()
	cgo := "1"
	if static {
		cgo = "0"
	}
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build rackcache-csi (CGO_ENABLED=%s): %v\n%s", cgo, err, out)
	}
	csiBuilt[static] = bin
	return bin
}

// WriteKubeconfig writes cfg (envtest's admin) as a kubeconfig file for a
// process under test.
func WriteKubeconfig(t testing.TB, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, TLSServerName: cfg.ServerName}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatalf("write kubeconfig: %v", err)
	}
	return path
}

// Process is a program under test started by StartProcess.
type Process struct {
	Log string
	cmd *exec.Cmd
}

// StartProcess runs bin with args, its output to a log file, and stops it
// (SIGTERM, SIGKILL after 10 s) when the test ends, printing the log's
// tail when the test failed.
func StartProcess(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), filepath.Base(bin)+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		t.Fatalf("start %s: %v", bin, err)
	}
	p := &Process{Log: logPath, cmd: cmd}
	t.Cleanup(func() {
		p.Stop()
		_ = logFile.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("%s log (%s):\n%s", filepath.Base(bin), logPath, tail(b, 200))
			}
		}
	})
	return p
}

// Stop ends the process: SIGTERM, then SIGKILL after 10 s.
func (p *Process) Stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// tail is the last n lines of b.
func tail(b []byte, n int) string {
	lines := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			lines++
			if lines > n {
				return fmt.Sprintf("[...]\n%s", b[i+1:])
			}
		}
	}
	return string(b)
}
