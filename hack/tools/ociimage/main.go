// Command ociimage builds a container image tarball from local files, with
// no Docker engine and no registry: one layer holding the given directory
// trees and files, and an image config for linux/amd64. The result is a
// docker-style image tarball (manifest.json, config, layer) that
// `ctr -n k8s.io images import` and `docker load` both accept.
//
// Every entry is owned by root and has a zero modification time, and the
// entries are written in a fixed order, so identical inputs give an
// identical image digest.
//
// Usage:
//
//	ociimage --ref NAME:TAG [--ref ...] --out FILE.tar \
//	    [--root DIR ...] [--file HOSTPATH:IMAGEPATH ...] \
//	    [--entrypoint ARG ...] [--cmd ARG ...] [--env K=V ...] \
//	    [--workdir DIR] [--user UID[:GID]]
//
// --root packs a directory tree as-is (modes and symlinks kept); --file adds
// one host file (symlinks followed) at an image path, its mode kept. Each
// --entrypoint and --cmd is one element of the argv.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// entry is one member of the layer: from a host path (file, directory or
// symlink) or a directory created for a --file's parents.
type entry struct {
	host string      // "" for a synthesized directory
	mode fs.FileMode // type and permission bits
	link string      // symlink target
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	var refs, roots, files, entrypoint, cmd, env list
	fl := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	fl.Var(&refs, "ref", "image reference NAME:TAG (repeatable: more tags of the same image)")
	out := fl.String("out", "", "image tarball to write")
	fl.Var(&roots, "root", "directory tree packed as the image's / (repeatable)")
	fl.Var(&files, "file", "HOSTPATH:IMAGEPATH, a file added at IMAGEPATH (repeatable)")
	fl.Var(&entrypoint, "entrypoint", "one element of the entrypoint (repeatable)")
	fl.Var(&cmd, "cmd", "one element of the default arguments (repeatable)")
	fl.Var(&env, "env", "K=V in the environment (repeatable; PATH has a default)")
	workdir := fl.String("workdir", "/", "working directory")
	user := fl.String("user", "", "user the container runs as, UID[:GID]")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if len(refs) == 0 || *out == "" {
		return errors.New("--ref and --out are required")
	}
	if fl.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fl.Args())
	}

	entries := map[string]entry{}
	for _, r := range roots {
		if err := addTree(entries, r); err != nil {
			return err
		}
	}
	for _, f := range files {
		host, dst, ok := strings.Cut(f, ":")
		if !ok || host == "" || !strings.HasPrefix(dst, "/") {
			return fmt.Errorf("--file %q: want HOSTPATH:/IMAGEPATH", f)
		}
		if err := addFile(entries, host, dst); err != nil {
			return err
		}
	}

	layerFile, err := os.CreateTemp(filepath.Dir(*out), ".layer-*.tar")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(layerFile.Name()) }()
	if err := writeLayer(layerFile, entries); err != nil {
		_ = layerFile.Close()
		return err
	}
	if err := layerFile.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return os.Open(layerFile.Name()) })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Entrypoint = entrypoint
	cf.Config.Cmd = cmd
	cf.Config.WorkingDir = *workdir
	cf.Config.User = *user
	cf.Config.Env = mergeEnv(env)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return err
	}

	var tags []string
	for _, r := range refs {
		tag, err := name.NewTag(r, name.StrictValidation)
		if err != nil {
			return fmt.Errorf("--ref %q: %w", r, err)
		}
		tags = append(tags, tag.String())
	}
	tmp := *out + ".tmp"
	if err := writeArchive(tmp, tags, img); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, *out); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s\n", *out, d, strings.Join(refs, ","))
	return nil
}

// writeArchive writes img as a docker-style image tarball (what
// tarball.MultiRefWriteToFile writes, but with the tags in the order given,
// so that the file itself is reproducible): the config, the compressed
// layers, then manifest.json.
func writeArchive(path string, tags []string, img v1.Image) error {
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	tw := tar.NewWriter(f)
	add := func(name string, size int64, r io.Reader) error {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := io.Copy(tw, r)
		return err
	}
	if err := add(cfgName.String(), int64(len(cfg)), bytes.NewReader(cfg)); err != nil {
		return err
	}
	manifest := []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{{Config: cfgName.String(), RepoTags: tags}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		name := d.Hex + ".tar.gz"
		err = add(name, size, rc)
		_ = rc.Close()
		if err != nil {
			return err
		}
		manifest[0].Layers = append(manifest[0].Layers, name)
	}
	m, err := json.Marshal(manifest)
	if err != nil {
		return err
	}
	if err := add("manifest.json", int64(len(m)), bytes.NewReader(m)); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// mergeEnv puts the default PATH first unless the caller sets PATH.
func mergeEnv(env []string) []string {
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			return env
		}
	}
	return append([]string{defaultPath}, env...)
}

// addTree adds every member of the tree under root, as image paths
// relative to /; symlinks stay symlinks.
func addTree(entries map[string]entry, root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := entry{host: p, mode: info.Mode()}
		if info.Mode()&fs.ModeSymlink != 0 {
			if e.link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !info.Mode().IsRegular() && !info.IsDir() {
			return fmt.Errorf("%s: neither file, directory nor symlink", p)
		}
		entries[filepath.ToSlash(rel)] = e
		return nil
	})
}

// addFile adds host (its symlinks followed) at dst and any missing parent
// directory with mode 0755.
func addFile(entries map[string]entry, host, dst string) error {
	info, err := os.Stat(host)
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("--file %s: not a regular file", host)
	}
	rel := strings.TrimPrefix(path.Clean(dst), "/")
	entries[rel] = entry{host: host, mode: info.Mode()}
	for dir := path.Dir(rel); dir != "."; dir = path.Dir(dir) {
		if _, ok := entries[dir]; !ok {
			entries[dir] = entry{mode: fs.ModeDir | 0o755}
		}
	}
	return nil
}

// writeLayer writes the entries sorted by path (parents before children),
// owned by root, with zero modification times.
func writeLayer(w io.Writer, entries map[string]entry) error {
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tar.NewWriter(w)
	for _, n := range names {
		e := entries[n]
		hdr := &tar.Header{
			Name:    n,
			Mode:    int64(e.mode.Perm()),
			ModTime: time.Unix(0, 0),
			Format:  tar.FormatPAX,
		}
		if e.mode&fs.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		if e.mode&fs.ModeSetuid != 0 {
			hdr.Mode |= 0o4000
		}
		if e.mode&fs.ModeSetgid != 0 {
			hdr.Mode |= 0o2000
		}
		switch {
		case e.mode.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, n+"/"
		case e.mode&fs.ModeSymlink != 0:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.link
		default:
			hdr.Typeflag = tar.TypeReg
		}
		var f *os.File
		if hdr.Typeflag == tar.TypeReg {
			var err error
			if f, err = os.Open(e.host); err != nil {
				return err
			}
			st, err := f.Stat()
			if err != nil {
				_ = f.Close()
				return err
			}
			hdr.Size = st.Size()
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if f != nil {
			_, err := io.Copy(tw, f)
			_ = f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", e.host, err)
			}
		}
	}
	return tw.Close()
}
