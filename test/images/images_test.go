// Package images checks the container images hack/images.sh builds as image
// tarballs (no Docker engine, no registry): it unpacks each image's layers
// into a directory and, as root, runs the image's own programs in it with
// chroot, so a missing shared library, loader, plugin or tool fails here and
// not in a cluster.
package images

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rackcache/rackcache/test/framework"
)

const (
	registry = "ghcr.io/rackcache"
	// buildTimeout bounds hack/images.sh; cold it builds the dataplane
	// (cargo --release) and five sidecars (~25 min on 2 cores).
	buildTimeout = 50 * time.Minute
	runTimeout   = 2 * time.Minute
)

// image is what the test reads from one image tarball.
type image struct {
	refs   []string
	config imageConfig
	root   string // the unpacked layers
}

type imageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		Entrypoint []string `json:"Entrypoint"`
		Cmd        []string `json:"Cmd"`
		Env        []string `json:"Env"`
		User       string   `json:"User"`
		WorkingDir string   `json:"WorkingDir"`
	} `json:"config"`
	RootFS struct {
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// missing stops the test when root or a Debian tool is absent (the checks
// chroot into each image; hack/deps.sh installs the tools).
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	framework.MissingDependency(t, "%s; run as root after `hack/deps.sh apt` to build and check the images", fmt.Sprintf(format, args...))
}

func TestImages(t *testing.T) {
	if os.Geteuid() != 0 {
		missing(t, "not root: the checks chroot into each image")
	}
	for _, tool := range []string{"bash", "go", "cargo", "objcopy", "ldd", "chroot", "unshare", "flock", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(t, "%s not found on PATH", tool)
		}
	}
	for _, f := range []string{"/usr/bin/busybox", "/usr/lib/x86_64-linux-gnu/librbd.so.1"} {
		if _, err := os.Stat(f); err != nil {
			missing(t, "%s is missing (hack/deps.sh apt installs it)", f)
		}
	}

	dir := buildImages(t)
	appVersion := chartAppVersion(t)
	refs := readImagesTxt(t, dir)
	tmp := t.TempDir()
	load := func(ref string) *image {
		t.Helper()
		file, ok := refs[ref]
		if !ok {
			t.Fatalf("images.txt lists no %s (it lists %v)", ref, keys(refs))
		}
		return unpack(t, filepath.Join(dir, file), filepath.Join(tmp, strings.TrimSuffix(file, ".tar")))
	}

	t.Run("operator", func(t *testing.T) {
		img := load(registry + "/rackcache-operator:" + appVersion)
		checkConfig(t, img, []string{"/rackcache-operator"}, "65532:65532")
		checkSBOM(t, img, "sigs.k8s.io/controller-runtime")
		// As the chart runs it: a non-root user, statically linked.
		out := run(t, img, "65532:65532", "/rackcache-operator", "--help")
		mustContain(t, out, "-metrics-bind-address")
		checkStatic(t, filepath.Join(img.root, "rackcache-operator"))
	})

	t.Run("csi", func(t *testing.T) {
		img := load(registry + "/rackcache-csi:" + appVersion)
		checkConfig(t, img, []string{"/usr/local/bin/rackcache-csi"}, "")
		// Its libraries (librbd, librados) resolve at start-up.
		mustContain(t, run(t, img, "", "/usr/local/bin/rackcache-csi", "--help"), "-mode string")
		checkPlugins(t, img)
		// Debian 13's nvme-cli: NVMe/TCP TLS (connect --tls, the PSK into
		// the kernel keyring), which Debian 12's 2.3 lacks.
		mustContain(t, run(t, img, "", "nvme", "version"), "nvme version 2.13")
		// (nvme-cli's --help exits 1.)
		mustContain(t, run(t, img, "", "sh", "-c", "nvme connect --help 2>&1 || true"), "--tls ")
		mustContain(t, run(t, img, "", "sh", "-c", "nvme check-tls-key --help 2>&1 || true"), "--identity")
		checkSBOM(t, img, "nvme-cli", "librbd1", "github.com/ceph/go-ceph")
		for _, tool := range [][]string{
			{"mount", "--version"}, {"umount", "--version"}, {"findmnt", "--version"},
			{"lsblk", "--version"}, {"blkid", "--version"}, {"blockdev", "--version"},
			{"mkfs.xfs", "-V"}, {"xfs_growfs", "-V"}, {"xfs_repair", "-V"},
			{"sh", "-c", "command -v fsck.xfs"},
		} {
			run(t, img, "", tool[0], tool[1:]...)
		}
		// A real filesystem on a 300 MiB file inside the image: ext4 (made,
		// checked, grown), then xfs.
		disk := filepath.Join(img.root, "tmp", "disk.img")
		if err := os.WriteFile(disk, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(disk, 300<<20); err != nil {
			t.Fatal(err)
		}
		run(t, img, "", "mkfs.ext4", "-F", "-q", "/tmp/disk.img")
		mustEqual(t, strings.TrimSpace(run(t, img, "", "blkid", "-p", "-o", "value", "-s", "TYPE", "/tmp/disk.img")), "ext4")
		run(t, img, "", "fsck", "-n", "-t", "ext4", "/tmp/disk.img")
		if err := os.Truncate(disk, 400<<20); err != nil {
			t.Fatal(err)
		}
		run(t, img, "", "e2fsck", "-f", "-y", "/tmp/disk.img")
		run(t, img, "", "resize2fs", "/tmp/disk.img")
		mustContain(t, run(t, img, "", "dumpe2fs", "-h", "/tmp/disk.img"), "Block count:")
		run(t, img, "", "mkfs.xfs", "-f", "-q", "/tmp/disk.img")
		mustEqual(t, strings.TrimSpace(run(t, img, "", "blkid", "-p", "-o", "value", "-s", "TYPE", "/tmp/disk.img")), "xfs")
		run(t, img, "", "xfs_repair", "-n", "/tmp/disk.img")
		_ = os.Remove(disk)
	})

	t.Run("dataplane", func(t *testing.T) {
		img := load(registry + "/rackcache-dataplane:" + appVersion)
		checkConfig(t, img, []string{"/usr/local/bin/rackcache-dataplane"}, "")
		mustContain(t, run(t, img, "", "/usr/local/bin/rackcache-dataplane", "--help"), "--rpc-socket")
		checkPlugins(t, img)
		checkSBOM(t, img, "librbd1", "libssl3t64", "openssl", "tokio")
	})

	t.Run("pause", func(t *testing.T) {
		img := load("registry.k8s.io/pause:3.10")
		if refs["registry.k8s.io/pause:3.6"] != refs["registry.k8s.io/pause:3.10"] {
			t.Errorf("pause:3.6 (containerd 1.6's sandbox_image) is not the same image as pause:3.10: %v", refs)
		}
		checkConfig(t, img, []string{"/pause"}, "65535:65535")
		checkStatic(t, filepath.Join(img.root, "pause"))
		// It waits until SIGTERM and then exits 0.
		cmd := exec.Command("chroot", "--userspec=65535:65535", img.root, "/pause")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			t.Fatalf("pause exited by itself: %v, %s", err, stderr.String())
		case <-time.After(500 * time.Millisecond):
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("pause after SIGTERM: %v, %s", err, stderr.String())
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatal("pause did not exit on SIGTERM")
		}
	})

	// The sidecars, named as the chart's values.yaml names them.
	sidecars := chartSidecars(t)
	sidecars["snapshot-controller"] = "registry.k8s.io/sig-storage/snapshot-controller:v8.6.0"
	for name, ref := range sidecars {
		if name == "registrar" {
			// node-driver-registrar: no version is served by the Go module
			// proxy (403); rackcache-csi registers with the kubelet itself.
			if _, ok := refs[ref]; ok {
				t.Errorf("%s is built now: check it here", ref)
			}
			continue
		}
		t.Run("sidecar-"+name, func(t *testing.T) {
			img := load(ref)
			bin := "/" + ref[strings.LastIndex(ref, "/")+1:strings.LastIndex(ref, ":")]
			checkConfig(t, img, []string{bin}, "")
			checkStatic(t, filepath.Join(img.root, bin))
			mustContain(t, run(t, img, "65532:65532", bin, "--version"), ref[strings.LastIndex(ref, ":")+1:])
		})
	}

	// The e2e suite's workload image (hack/cluster.sh's WORKLOAD_IMAGE).
	t.Run("busybox", func(t *testing.T) {
		var ref string
		for r := range refs {
			if strings.HasPrefix(r, "rackcache.local/busybox:") {
				ref = r
			}
		}
		if ref == "" {
			t.Fatalf("images.txt lists no rackcache.local/busybox: %v", keys(refs))
		}
		img := load(ref)
		if c := img.config; len(c.Config.Entrypoint) != 0 || !slices.Equal(c.Config.Cmd, []string{"sh"}) || c.OS != "linux" || c.Architecture != "amd64" {
			t.Errorf("%s: entrypoint %q, cmd %q, %s/%s; want none, [sh], linux/amd64", ref, c.Config.Entrypoint, c.Config.Cmd, c.OS, c.Architecture)
		}
		checkStatic(t, filepath.Join(img.root, "usr/bin/busybox"))
		out := run(t, img, "65532:65532", "sh", "-c", "echo hello > /tmp/f && cat /tmp/f && id -u && ls /bin/ls /sbin/ip")
		mustContain(t, out, "hello\n65532\n")
	})

	t.Run("snapshot-crds", func(t *testing.T) {
		for _, kind := range []string{"volumesnapshotclasses", "volumesnapshotcontents", "volumesnapshots"} {
			b, err := os.ReadFile(filepath.Join(dir, "snapshot-crds", "snapshot.storage.k8s.io_"+kind+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			mustContain(t, string(b), "kind: CustomResourceDefinition")
		}
	})
}

// buildImages runs hack/images.sh (cached: quick when nothing changed) and
// returns the directory holding the tarballs.
func buildImages(t *testing.T) string {
	t.Helper()
	timeout := buildTimeout
	if d, ok := t.Deadline(); ok && time.Until(d)-time.Minute < timeout {
		timeout = time.Until(d) - time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", framework.HackScript("images.sh"), "--print-dir")
	cmd.Dir = framework.RepoRoot()
	// Its own process group, so that a timeout ends its builds too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/images.sh (%s, limit %s): %v\n%s", time.Since(start).Round(time.Second), timeout, err, tail(stderr.String(), 60))
	}
	dir := strings.TrimSpace(string(out))
	t.Logf("images in %s (hack/images.sh: %s)", dir, time.Since(start).Round(time.Second))
	return dir
}

func readImagesTxt(t *testing.T, dir string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "images.txt"))
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			t.Fatalf("images.txt: bad line %q", sc.Text())
		}
		refs[f[0]] = f[1]
	}
	return refs
}

// unpack reads a docker-style image tarball (manifest.json, config, gzipped
// layers), checks each layer against the config's diff_ids, and extracts the
// layers in order into root.
func unpack(t *testing.T, tarball, root string) *image {
	t.Helper()
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	members := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", tarball, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("%s: %s: %v", tarball, hdr.Name, err)
		}
		members[hdr.Name] = b
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(members["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("%s: manifest.json: %v (%d images)", tarball, err, len(manifest))
	}
	img := &image{refs: manifest[0].RepoTags, root: root}
	if err := json.Unmarshal(members[manifest[0].Config], &img.config); err != nil {
		t.Fatalf("%s: config %s: %v", tarball, manifest[0].Config, err)
	}
	if len(manifest[0].Layers) != len(img.config.RootFS.DiffIDs) {
		t.Fatalf("%s: %d layers, %d diff_ids", tarball, len(manifest[0].Layers), len(img.config.RootFS.DiffIDs))
	}
	for i, name := range manifest[0].Layers {
		gz, err := gzip.NewReader(bytes.NewReader(members[name]))
		if err != nil {
			t.Fatalf("%s: layer %s: %v", tarball, name, err)
		}
		raw, err := io.ReadAll(gz)
		if err != nil {
			t.Fatalf("%s: layer %s: %v", tarball, name, err)
		}
		sum := sha256.Sum256(raw)
		if got := "sha256:" + hex.EncodeToString(sum[:]); got != img.config.RootFS.DiffIDs[i] {
			t.Fatalf("%s: layer %s is %s, the config says %s", tarball, name, got, img.config.RootFS.DiffIDs[i])
		}
		if err := extract(raw, root); err != nil {
			t.Fatalf("%s: layer %s: %v", tarball, name, err)
		}
	}
	return img
}

// extract writes a layer's members under root, never outside it.
func extract(layer []byte, root string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	root, err := filepath.EvalSymlinks(root)
	if err != nil {
		return err
	}
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		rel := filepath.Clean(hdr.Name)
		if filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("member %q outside the root", hdr.Name)
		}
		p := filepath.Join(root, rel)
		// The parent must be a real directory of the tree (no symlink).
		if parent, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil && parent != filepath.Dir(p) {
			return fmt.Errorf("member %q lies under a symlink", hdr.Name)
		}
		mode := hdr.FileInfo().Mode()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, p); err != nil {
				return err
			}
			continue
		case tar.TypeReg:
			out, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("member %q: unexpected type %c", hdr.Name, hdr.Typeflag)
		}
		if err := os.Chmod(p, mode&(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky)); err != nil {
			return err
		}
	}
}

// run runs argv inside the image's root (in new mount and PID namespaces) with the image's environment (as
// user UID:GID when set) and returns its standard output and error.
func run(t *testing.T, img *image, user, prog string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	// A /proc of its own, as in a container (e2fsprogs and mkfs.xfs read
	// /proc/self/mounts); the mount goes with the namespace.
	argv := []string{"--pid", "--fork", "--kill-child", "--mount-proc=" + filepath.Join(img.root, "proc"), "chroot"}
	if user != "" {
		argv = append(argv, "--userspec="+user)
	}
	argv = append(append(argv, img.root, prog), args...)
	cmd := exec.CommandContext(ctx, "unshare", argv...)
	cmd.Env = img.config.Config.Env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("in %s: %s %s: %v\n%s", filepath.Base(img.root), prog, strings.Join(args, " "), err, tail(string(out), 40))
	}
	return string(out)
}

// checkPlugins: librados' private libceph-common and the plugins it
// dlopens (where the package ships any: Debian 13's ships none) find every
// library they need inside the image (the image's loader lists them).
func checkPlugins(t *testing.T, img *image) {
	t.Helper()
	plugins, _ := filepath.Glob(filepath.Join(img.root, "usr/lib/x86_64-linux-gnu/ceph/*/*.so"))
	plugins = append(plugins, filepath.Join(img.root, "usr/lib/x86_64-linux-gnu/ceph/libceph-common.so.2"))
	for _, p := range plugins {
		rel := strings.TrimPrefix(p, img.root)
		out := run(t, img, "", "/lib64/ld-linux-x86-64.so.2", "--list", rel)
		if strings.Contains(out, "not found") {
			t.Errorf("%s: %s", rel, out)
		}
	}
}

func checkConfig(t *testing.T, img *image, entrypoint []string, user string) {
	t.Helper()
	c := img.config
	if c.OS != "linux" || c.Architecture != "amd64" {
		t.Errorf("%v: platform %s/%s, want linux/amd64", img.refs, c.OS, c.Architecture)
	}
	if !slices.Equal(c.Config.Entrypoint, entrypoint) {
		t.Errorf("%v: entrypoint %q, want %q", img.refs, c.Config.Entrypoint, entrypoint)
	}
	if c.Config.User != user {
		t.Errorf("%v: user %q, want %q", img.refs, c.Config.User, user)
	}
	if !slices.ContainsFunc(c.Config.Env, func(e string) bool { return strings.HasPrefix(e, "PATH=/") }) {
		t.Errorf("%v: no PATH in %q", img.refs, c.Config.Env)
	}
	if _, err := os.Stat(filepath.Join(img.root, entrypoint[0])); err != nil {
		t.Errorf("%v: entrypoint: %v", img.refs, err)
	}
}

// checkStatic: an ELF executable without an interpreter (no loader, no
// shared libraries).
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked", path)
		}
	}
}

func chartAppVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "charts", "rackcache", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "appVersion:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	t.Fatal("Chart.yaml has no appVersion")
	return ""
}

// chartSidecars returns values.yaml's csi.sidecars images by key.
func chartSidecars(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "charts", "rackcache", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]string{}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case line == "  sidecars:":
			in = true
		case in && strings.HasPrefix(line, "    ") && !strings.HasPrefix(strings.TrimSpace(line), "#"):
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			if v = strings.TrimSpace(v); strings.Contains(v, "/") {
				images[k] = v
			}
		case in && strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "    "):
			in = false
		}
	}
	if len(images) < 5 {
		t.Fatalf("values.yaml csi.sidecars: %v", images)
	}
	return images
}

func mustContain(t *testing.T, s, sub string) {
	t.Helper()
	if !strings.Contains(s, sub) {
		t.Errorf("output lacks %q:\n%s", sub, tail(s, 30))
	}
}

func mustEqual(t *testing.T, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func keys(m map[string]string) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	slices.Sort(k)
	return k
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// checkSBOM: the image carries an SPDX document naming each of want as a
// package, each package with a version and a package URL.
func checkSBOM(t *testing.T, img *image, want ...string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(img.root, "usr/share/rackcache/sbom.spdx.json"))
	if err != nil {
		t.Fatalf("no SBOM in the image: %v", err)
	}
	var doc struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			Name         string `json:"name"`
			VersionInfo  string `json:"versionInfo"`
			ExternalRefs []struct {
				Locator string `json:"referenceLocator"`
			} `json:"externalRefs"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil || doc.SPDXVersion != "SPDX-2.3" {
		t.Fatalf("SBOM: %v, version %q", err, doc.SPDXVersion)
	}
	have := map[string]bool{}
	for _, p := range doc.Packages {
		if p.VersionInfo == "" || len(p.ExternalRefs) != 1 || !strings.HasPrefix(p.ExternalRefs[0].Locator, "pkg:") {
			t.Errorf("SBOM package %+v: no version or package URL", p)
		}
		have[p.Name] = true
	}
	for _, w := range want {
		if !have[w] {
			t.Errorf("the SBOM lists no %s (%d packages)", w, len(doc.Packages))
		}
	}
}
