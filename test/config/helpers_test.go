package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/rackcache/rackcache/test/framework"
)

// buildOverlay runs the pinned kustomize (bin/kustomize, installed by
// hack/deps.sh go-tools) on a config/ directory and decodes every object.
func buildOverlay(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	kustomize := filepath.Join(framework.RepoRoot(), "bin", "kustomize")
	if _, err := os.Stat(kustomize); err != nil {
		run(t, framework.HackScript("deps.sh"), "go-tools")
	}
	out := run(t, kustomize, "build", filepath.Join(framework.RepoRoot(), "config", dir))
	return decodeManifests(t, "config/"+dir, out)
}

// decodeManifests decodes every object of a multi-document YAML stream
// (what built it is named in errors).
func decodeManifests(t *testing.T, source string, out []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decode the objects of %s: %v", source, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
			t.Fatalf("%s: an object without apiVersion, kind or name: %v", source, u.Object)
		}
		objs = append(objs, u)
	}
	if len(objs) == 0 {
		t.Fatalf("%s: no objects", source)
	}
	return objs
}

// find returns the one object of kind named name (any name when "").
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	var hits []*unstructured.Unstructured
	for _, u := range objs {
		if u.GetKind() == kind && (name == "" || u.GetName() == name) {
			hits = append(hits, u)
		}
	}
	if len(hits) != 1 {
		t.Fatalf("want exactly one %s %q in config/default, found %d", kind, name, len(hits))
	}
	return hits[0]
}

// typed converts u into a typed object.
func typed[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &out, true); err != nil {
		t.Fatalf("%s %s does not decode as its Go type: %v", u.GetKind(), u.GetName(), err)
	}
	return &out
}

// run runs a command and returns its stdout; it fails the test with
// stderr when the command fails.
func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// operatorBinary builds cmd/operator once into the test's temporary dir.
func operatorBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rackcache-operator")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/operator")
	cmd.Dir = framework.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build cmd/operator: %v\n%s", err, out)
	}
	return bin
}

var flagLine = regexp.MustCompile(`(?m)^\s+-{1,2}([a-z0-9][a-z0-9-]*)`)

// operatorFlags lists the flags `rackcache-operator --help` documents.
func operatorFlags(t *testing.T, bin string) map[string]bool {
	t.Helper()
	// The flag package prints usage to stderr and exits 0 on --help.
	cmd := exec.Command(bin, "--help")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rackcache-operator --help: %v\n%s", err, out)
	}
	flags := map[string]bool{}
	for _, m := range flagLine.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) == 0 {
		t.Fatalf("rackcache-operator --help listed no flags:\n%s", out)
	}
	return flags
}

// prometheusOperatorVersion is the release whose ServiceMonitor CRD the
// apiserver test installs (the newest the Go module proxy serves here).
const prometheusOperatorVersion = "v0.85.0"

// serviceMonitorCRD returns the path of the Prometheus Operator's
// ServiceMonitor CRD, fetched through the Go module proxy into Go's module
// cache (a no-op when it is there), or "" with the reason when unreachable.
func serviceMonitorCRD(t *testing.T) (string, error) {
	return prometheusOperatorCRD(t, "servicemonitors")
}

// prometheusOperatorCRD is the CRD of resource plural (servicemonitors,
// prometheusrules) of monitoring.coreos.com, as serviceMonitorCRD.
func prometheusOperatorCRD(t *testing.T, plural string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/prometheus-operator/prometheus-operator@"+prometheusOperatorVersion)
	// Outside the project's module: nothing is added to its go.mod/go.sum.
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.Output()
	var mod struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &mod); jerr != nil || mod.Error != "" || mod.Dir == "" {
		return "", errors.Join(err, jerr, errors.New(mod.Error))
	}
	path := filepath.Join(mod.Dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_"+plural+".yaml")
	if _, err := os.Stat(path); err != nil {
		return "", err
	}
	return path, nil
}

// endpointPort returns the port name of a ServiceMonitor's first endpoint.
func endpointPort(sm map[string]any) string {
	eps, _, _ := unstructured.NestedSlice(sm, "spec", "endpoints")
	if len(eps) == 0 {
		return ""
	}
	ep, _ := eps[0].(map[string]any)
	port, _ := ep["port"].(string)
	return port
}
