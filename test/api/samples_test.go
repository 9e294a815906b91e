package api

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/test/framework"
)

// sampleEntries lists config/samples while the tree is built: one entry per
// sample, so that the examples docs/operator.md points at stay valid.
func sampleEntries() []TableEntry {
	files, _ := filepath.Glob(filepath.Join(framework.RepoRoot(), "config", "samples", "rackcache_*.yaml"))
	var entries []TableEntry
	for _, f := range files {
		entries = append(entries, Entry(filepath.Base(f), f))
	}
	return entries
}

var _ = Describe("config/samples", func() {
	It("holds a Rook pool, a pool with explicit monitors and a volume", func() {
		Expect(sampleEntries()).To(HaveLen(3))
	})

	DescribeTable("the apiserver accepts the sample",
		func(ctx context.Context, path string) {
			raw, err := os.ReadFile(path)
			Expect(err).NotTo(HaveOccurred())
			var obj client.Object
			switch {
			case strings.Contains(string(raw), "kind: CachePool\n"):
				obj = &rcv1.CachePool{}
			case strings.Contains(string(raw), "kind: CachedVolume\n"):
				obj = &rcv1.CachedVolume{}
			default:
				Fail(path + ": neither a CachePool nor a CachedVolume")
			}
			Expect(yaml.UnmarshalStrict(raw, obj)).To(Succeed(), "decode %s", path)
			create(ctx, obj)
		},
		sampleEntries(),
	)
})
