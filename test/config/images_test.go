package config

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rackcache/rackcache/test/framework"
)

// No image is built here (no registry is reachable); these checks catch
// what breaks image builds most: a COPY of a path that does not exist, a
// Go package of the project the build needs but the image never copied,
// an unpinned base, an entrypoint that is not what the build stage made.
func TestDockerfiles(t *testing.T) {
	root := framework.RepoRoot()
	files, _ := filepath.Glob(filepath.Join(root, "images", "*", "Dockerfile"))
	if len(files) != 3 {
		t.Fatalf("images/*/Dockerfile: %d files, want operator, csi and dataplane", len(files))
	}
	copyLine := regexp.MustCompile(`(?m)^COPY\s+(--from=\S+\s+)?(.+)\s+(\S+)$`)
	from := regexp.MustCompile(`(?m)^FROM\s+(\S+)`)
	goBuild := regexp.MustCompile(`go build .* -o (\S+) (\./cmd/\S+)`)
	entry := regexp.MustCompile(`(?m)^ENTRYPOINT \["([^"]+)"\]`)
	for _, f := range files {
		name := filepath.Base(filepath.Dir(f))
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			text := string(b)
			for _, m := range from.FindAllStringSubmatch(text, -1) {
				ref, digest, pinned := strings.Cut(m[1], "@")
				if ref == "scratch" {
					continue // the empty image: nothing is pulled
				}
				if !strings.Contains(ref, ":") || strings.HasSuffix(ref, ":latest") {
					t.Errorf("base image %s is not pinned to a tag", m[1])
				}
				if pinned && !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(digest) {
					t.Errorf("base image %s: %q is not a sha256 digest", m[1], digest)
				}
				if !pinned {
					t.Errorf("base image %s has no digest (docs/images.md says how to find one)", m[1])
				}
			}
			var copied []string
			finalCopies := ""
			for _, m := range copyLine.FindAllStringSubmatch(text, -1) {
				if m[1] != "" {
					finalCopies += m[3] + "\n"
					continue
				}
				for _, src := range strings.Fields(m[2]) {
					if _, err := os.Stat(filepath.Join(root, src)); err != nil {
						t.Errorf("COPY %s: not in the repository", src)
					}
					copied = append(copied, strings.TrimSuffix(src, "/"))
				}
			}
			ep := entry.FindStringSubmatch(text)
			if ep == nil || !strings.Contains(finalCopies, ep[1]) {
				t.Errorf("ENTRYPOINT %v is not a file the final stage copied from the build stage (%q)", ep, finalCopies)
			}
			if m := goBuild.FindStringSubmatch(text); m != nil {
				checkGoDeps(t, root, m[2], copied)
			}
		})
	}
}

// checkGoDeps: every package of this module that pkg imports lies under a
// directory the Dockerfile copies.
func checkGoDeps(t *testing.T, root, pkg string, copied []string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	const module = "github.com/rackcache/rackcache/"
	for _, p := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(p, module)
		if !ok {
			continue
		}
		in := false
		for _, c := range copied {
			in = in || rel == c || strings.HasPrefix(rel, c+"/")
		}
		if !in {
			t.Errorf("%s needs package %s, which the Dockerfile never copies", pkg, rel)
		}
	}
}
