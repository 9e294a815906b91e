package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

var (
	envtestAssetsOnce sync.Once
	envtestAssetsDir  string
	envtestAssetsErr  error
)

// EnvtestAssets returns the directory holding kube-apiserver and etcd, built
// from source by hack/envtest-assets.sh (a no-op when they are cached).
// KUBEBUILDER_ASSETS, when set, wins.
func EnvtestAssets(t testing.TB) string {
	t.Helper()
	envtestAssetsOnce.Do(func() {
		if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
			envtestAssetsDir = dir
			return
		}
		cmd := exec.Command(HackScript("envtest-assets.sh"), "--print-dir")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			envtestAssetsErr = fmt.Errorf("hack/envtest-assets.sh: %w: %s", err, stderr.String())
			return
		}
		envtestAssetsDir = strings.TrimSpace(string(out))
	})
	if envtestAssetsErr != nil {
		t.Fatalf("envtest assets: %v", envtestAssetsErr)
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(envtestAssetsDir, bin)); err != nil {
			t.Fatalf("envtest assets: %v (run hack/envtest-assets.sh)", err)
		}
	}
	return envtestAssetsDir
}

// StartEnvtest starts a real kube-apiserver and etcd, installs the CRDs found
// in crdDirs (none is fine), and stops both when the test ends.
func StartEnvtest(t testing.TB, crdDirs ...string) (*envtest.Environment, *rest.Config) {
	t.Helper()
	env := &envtest.Environment{
		BinaryAssetsDirectory: EnvtestAssets(t),
		CRDDirectoryPaths:     crdDirs,
		ErrorIfCRDPathMissing: len(crdDirs) > 0,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest (kube-apiserver + etcd): %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop envtest: %v", err)
		}
	})
	return env, cfg
}
