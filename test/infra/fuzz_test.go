package infra_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rackcache/rackcache/test/framework"
)

// TestFuzzScriptFailsOnABrokenTarget runs hack/fuzz.sh (what `make test`
// runs) on a fuzz target that does not exist, so cargo-fuzz cannot build it:
// the script must fail and say why, not pass on a run that fuzzed nothing.
func TestFuzzScriptFailsOnABrokenTarget(t *testing.T) {
	t.Cleanup(func() {
		_ = os.RemoveAll(filepath.Join(framework.CacheDir(), "fuzz-corpus", "no_such_target"))
	})
	cmd := exec.Command(framework.HackScript("fuzz.sh"), "1")
	cmd.Env = append(os.Environ(),
		"RACKCACHE_FUZZ_TARGETS=dataplane/nvmf/fuzz:no_such_target:seeds/pdu")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("hack/fuzz.sh passed on a target that cannot build:\n%s", out)
	}
	if !strings.Contains(string(out), "no_such_target: cargo fuzz run failed") {
		t.Fatalf("hack/fuzz.sh failed without naming the broken target:\n%s", out)
	}
}
