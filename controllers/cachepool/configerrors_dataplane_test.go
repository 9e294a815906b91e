package cachepool

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rackcache/rackcache/controllers/cachedvolume"
	"github.com/rackcache/rackcache/test/framework"
)

// TestKeptConfigErrorsOfDeletedVolumesAreDropped: a real dataplane whose
// persisted configuration has failing calls starts and keeps them; the
// pool's probe drops those of a volume that no longer exists (here its
// RBD bdev, whose image is gone) from the dataplane and its persisted
// file, and reports the others in the server's status lines.
func TestKeptConfigErrorsOfDeletedVolumesAreDropped(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	aio := func(name string) string {
		return `{"method": "bdev_aio_create", "params": {"name": "` + name + `", "filename": "` + missing + `", "block_size": 4096}}`
	}
	persisted := filepath.Join(dir, "persisted.json")
	config := `{"subsystems": [{"subsystem": "bdev", "config": [
		{"method": "bdev_malloc_create", "params": {"name": "M0", "num_blocks": 64, "block_size": 512}},
		` + aio(cachedvolume.RbdBdevName("gone")) + `,
		` + aio(cachedvolume.RbdBdevName("kept")) + `,
		` + aio("cache7") + `]}]}`
	if err := os.WriteFile(persisted, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	dp := framework.StartDataplane(t, "--config-persist", persisted)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if kept, err := dp.Client.ConfigErrors(ctx); err != nil || len(kept) != 3 {
		t.Fatalf("the dataplane keeps the 3 failed calls: %+v, %v", kept, err)
	}

	got := serverReading{liveObjects: map[string]bool{}}
	for _, o := range cachedvolume.ObjectNames("kept") {
		got.liveObjects[o] = true
	}
	r := &Reconciler{}
	if err := r.readInto(ctx, dp.Client, testPool("kept-errors"), &got); err != nil {
		t.Fatalf("read the server: %v", err)
	}
	if len(got.ConfigErrors) != 2 || !strings.Contains(got.ConfigErrors[0], "rbd-kept") || !strings.Contains(got.ConfigErrors[1], "cache7") {
		t.Errorf("reported %q; want rbd-kept's and cache7's calls", got.ConfigErrors)
	}
	kept, err := dp.Client.ConfigErrors(ctx)
	if err != nil || len(kept) != 2 {
		t.Errorf("the dataplane still keeps %+v (%v); want rbd-gone's call dropped", kept, err)
	}
	file, err := os.ReadFile(persisted)
	if err != nil || strings.Contains(string(file), "rbd-gone") || !strings.Contains(string(file), "rbd-kept") {
		t.Errorf("persisted file after the drop (%v):\n%s", err, file)
	}
	if st := serverStatus(&got); !strings.Contains(strings.Join(st.ConfigErrors, "\n"), "rbd-kept") {
		t.Errorf("server status lacks the kept call: %+v", st)
	}
}
