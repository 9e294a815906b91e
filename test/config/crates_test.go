package config

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/rackcache/rackcache/test/framework"
)

// TestDataplaneCrateMap checks dataplane/README.md's crate map against
// the workspace as cargo reads it: every crate has a row, every row is a
// crate, and no crate has a normal dependency on a workspace crate its row
// does not allow (tests and benches are free to use more).
func TestDataplaneCrateMap(t *testing.T) {
	cargo := framework.RequireCommand(t, "cargo")
	dir := filepath.Join(framework.RepoRoot(), "dataplane")
	cmd := exec.Command(cargo, "metadata", "--format-version", "1", "--no-deps", "--offline")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cargo metadata: %v", err)
	}
	var meta struct {
		Packages []struct {
			Name         string
			Dependencies []struct {
				Name string
				Kind *string
				Path string
			}
		}
	}
	if err := json.Unmarshal(out, &meta); err != nil {
		t.Fatalf("parse cargo metadata: %v", err)
	}
	allowed := readCrateMap(t, filepath.Join(dir, "README.md"))

	var crates []string
	for _, p := range meta.Packages {
		crates = append(crates, p.Name)
		may, ok := allowed[p.Name]
		if !ok {
			t.Errorf("crate %s has no row in dataplane/README.md", p.Name)
			continue
		}
		for _, d := range p.Dependencies {
			if d.Path == "" || d.Kind != nil { // registry crates; dev and build deps
				continue
			}
			if !slices.Contains(may, d.Name) {
				t.Errorf("crate %s depends on %s, which its row in dataplane/README.md does not allow (allowed: %v)", p.Name, d.Name, may)
			}
		}
	}
	for c := range allowed {
		if !slices.Contains(crates, c) {
			t.Errorf("dataplane/README.md has a row for %s, which is not a workspace crate (crates: %v)", c, crates)
		}
	}
}

var crateRow = regexp.MustCompile("^\\| `([a-z0-9-]+)`[^|]*\\|[^|]*\\| ([^|]*) \\|$")

// readCrateMap reads the table's rows: crate name -> the crates it may
// depend on.
func readCrateMap(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the crate map: %v", err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		g := crateRow.FindStringSubmatch(line)
		if g == nil {
			continue
		}
		var deps []string
		for _, d := range strings.Split(g[2], ",") {
			if d = strings.TrimSpace(d); d != "" && d != "—" {
				deps = append(deps, d)
			}
		}
		sort.Strings(deps)
		m[g[1]] = deps
	}
	if len(m) == 0 {
		t.Fatalf("no crate rows in %s", path)
	}
	return m
}

// TestGoPackageMap checks docs/development.md's Go package map against
// `go list`: every project package is covered by a row, and no package's
// non-test code imports a project package its row does not allow.
func TestGoPackageMap(t *testing.T) {
	goTool := framework.RequireCommand(t, "go")
	const module = "github.com/rackcache/rackcache/"
	cmd := exec.Command(goTool, "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
	cmd.Dir = framework.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	rows := readGoPackageMap(t, filepath.Join(framework.RepoRoot(), "docs", "development.md"))
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		may, ok := rows[pkg]
		if !ok && strings.HasPrefix(pkg, "test/") {
			may, ok = rows["test/..."]
		}
		if !ok {
			t.Errorf("package %s has no row in docs/development.md's Go package map", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if dep, own := strings.CutPrefix(imp, module); own && !slices.Contains(may, dep) {
				t.Errorf("package %s imports %s, which its row in docs/development.md does not allow (allowed: %v)", pkg, dep, may)
			}
		}
	}
}

var goPackageRow = regexp.MustCompile("^\\| (`[^|]+`) \\|[^|]*\\| ([^|]*) \\|$")

// readGoPackageMap reads the Go package map's rows: package -> the project
// packages it may import. A row may name several packages.
func readGoPackageMap(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the package map: %v", err)
	}
	_, text, found := strings.Cut(string(b), "## Go packages")
	if !found {
		t.Fatalf("%s has no \"## Go packages\" section", path)
	}
	text, _, _ = strings.Cut(text, "\n## ")
	m := map[string][]string{}
	for _, line := range strings.Split(text, "\n") {
		g := goPackageRow.FindStringSubmatch(line)
		if g == nil {
			continue
		}
		var may []string
		for _, d := range strings.Split(g[2], ",") {
			if d = strings.TrimSpace(d); d != "" && d != "—" {
				may = append(may, d)
			}
		}
		for _, name := range strings.Split(g[1], ",") {
			m[strings.Trim(strings.TrimSpace(name), "`")] = may
		}
	}
	if len(m) == 0 {
		t.Fatalf("no package rows in %s", path)
	}
	return m
}
