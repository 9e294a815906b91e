package api

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/test/framework"
)

// testSamplesAccepted creates every object in config/samples so that the
// examples docs/operator.md points at stay valid.
func testSamplesAccepted(t *testing.T, c client.Client) {
	files, err := filepath.Glob(filepath.Join(framework.RepoRoot(), "config", "samples", "rackcache_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples found under config/samples (err %v)", err)
	}
	ctx := context.Background()
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("read sample: %v", err)
		}
		var obj client.Object
		switch {
		case strings.Contains(string(raw), "kind: CachePool\n"):
			obj = &rcv1.CachePool{}
		case strings.Contains(string(raw), "kind: CachedVolume\n"):
			obj = &rcv1.CachedVolume{}
		default:
			t.Fatalf("%s: neither a CachePool nor a CachedVolume", f)
		}
		if err := yaml.UnmarshalStrict(raw, obj); err != nil {
			t.Fatalf("%s: decode: %v", f, err)
		}
		if err := c.Create(ctx, obj); err != nil {
			t.Errorf("%s: apiserver refused the sample: %v", filepath.Base(f), err)
			continue
		}
		_ = c.Delete(ctx, obj)
	}
}
