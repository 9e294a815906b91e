package csi

import (
	"context"
	"os"
	"os/exec"

	"github.com/rackcache/rackcache/test/framework"
)

// runGo runs the go command at the repository's root, without cgo (the
// guest's programs are static).
func runGo(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = framework.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd.CombinedOutput()
}
