package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// prepare writes the pod's volumes under its directory and returns the
// container's command: the local dataplane binary with the container's
// arguments, $(VAR) references expanded from its environment and paths
// under its mounts pointing at the local volumes.
func (p *localPod) prepare() (*exec.Cmd, error) {
	c := p.pod.Spec.Containers[0]
	if err := os.MkdirAll(p.dir(), 0o700); err != nil {
		return nil, err
	}
	local := map[string]string{}
	for _, v := range p.pod.Spec.Volumes {
		path, err := p.materialize(v)
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		local[v.Name] = path
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		if m.SubPath != "" {
			return nil, fmt.Errorf("volume mount %s: subPath is not supported", m.Name)
		}
		mounts[m.MountPath] = local[m.Name]
	}
	sa, err := p.serviceAccountVolume()
	if err != nil {
		return nil, err
	}
	if sa != "" {
		mounts[serviceAccountMount] = sa
	}
	env, err := p.env(c)
	if err != nil {
		return nil, err
	}
	args := make([]string, 0, len(c.Args))
	for _, a := range c.Args {
		args = append(args, rewritePaths(expand(a, env), mounts))
	}
	if len(c.Command) > 0 {
		return nil, fmt.Errorf("container %s sets a command; only the image's entrypoint (the dataplane) is supported", c.Name)
	}
	logFile, err := os.OpenFile(filepath.Join(p.dir(), "container.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(p.k.dataplane, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// Its own process group: stopping the pod stops all of it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}

// materialize makes a volume's content on disk and returns its path.
func (p *localPod) materialize(v corev1.Volume) (string, error) {
	dir := filepath.Join(p.dir(), v.Name)
	switch {
	case v.EmptyDir != nil:
		return dir, os.MkdirAll(dir, 0o700)
	case v.Secret != nil:
		s := &corev1.Secret{}
		err := p.k.c.Get(p.ctx, client.ObjectKey{Namespace: p.pod.Namespace, Name: v.Secret.SecretName}, s)
		switch {
		case apierrors.IsNotFound(err) && ptr.Deref(v.Secret.Optional, false):
			// As the kubelet: an optional Secret that is missing is an
			// empty directory.
			return dir, os.MkdirAll(dir, 0o700)
		case err != nil:
			return "", fmt.Errorf("get Secret %s: %w", v.Secret.SecretName, err)
		}
		return dir, writeFiles(dir, s.Data, v.Secret.DefaultMode)
	case v.ConfigMap != nil:
		cm := &corev1.ConfigMap{}
		if err := p.k.c.Get(p.ctx, client.ObjectKey{Namespace: p.pod.Namespace, Name: v.ConfigMap.Name}, cm); err != nil {
			return "", fmt.Errorf("get ConfigMap %s: %w", v.ConfigMap.Name, err)
		}
		data := map[string][]byte{}
		for k, s := range cm.Data {
			data[k] = []byte(s)
		}
		return dir, writeFiles(dir, data, v.ConfigMap.DefaultMode)
	case v.HostPath != nil:
		// A path in the demo's directory (the parent of --dir: the cache
		// file the CachePool lists) is used as it is, so the dataplane's
		// configuration names it right. Any other path of the "node"
		// lives under node-root, never in the real /var or /dev.
		if strings.HasPrefix(v.HostPath.Path, filepath.Dir(p.k.dir)+"/") {
			return v.HostPath.Path, nil
		}
		path := filepath.Join(p.k.dir, "node-root", v.HostPath.Path)
		return path, os.MkdirAll(path, 0o700)
	}
	return "", fmt.Errorf("unsupported volume type")
}

// writeFiles writes a Secret's or ConfigMap's keys as files, as the kubelet
// projects them (mode 0644 unless the volume says otherwise).
func writeFiles(dir string, data map[string][]byte, mode *int32) error {
	perm := os.FileMode(0o644)
	if mode != nil {
		perm = os.FileMode(*mode)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for k, v := range data {
		path := filepath.Join(dir, k)
		_ = os.Remove(path) // a read-only file of an earlier start
		if err := os.WriteFile(path, v, perm); err != nil {
			return err
		}
	}
	return nil
}

// env resolves the container's environment (literal values and the
// downward API fields a host-network pod uses).
func (p *localPod) env(c corev1.Container) (map[string]string, error) {
	// The kubelet's own entries first: the container's win.
	out, err := p.k.serviceEnv()
	if err != nil {
		return nil, err
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			out[e.Name] = expand(e.Value, out)
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "status.podIP", "status.hostIP":
				out[e.Name] = p.k.address
			case "spec.nodeName":
				out[e.Name] = p.k.node
			case "metadata.name":
				out[e.Name] = p.pod.Name
			case "metadata.namespace":
				out[e.Name] = p.pod.Namespace
			default:
				return nil, fmt.Errorf("env %s: field %s is not supported", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		default:
			return nil, fmt.Errorf("env %s: only values and field references are supported", e.Name)
		}
	}
	return out, nil
}

// expand replaces $(NAME) with env's NAME, as the kubelet does in args.
func expand(s string, env map[string]string) string {
	for k, v := range env {
		s = strings.ReplaceAll(s, "$("+k+")", v)
	}
	return s
}

// rewritePaths points an argument (PATH or --flag=PATH) under a mount path
// at the mount's local directory; the longest mount path wins.
func rewritePaths(arg string, mounts map[string]string) string {
	prefix, path := "", arg
	if i := strings.Index(arg, "="); i >= 0 && strings.HasPrefix(arg, "-") {
		prefix, path = arg[:i+1], arg[i+1:]
	}
	paths := make([]string, 0, len(mounts))
	for mp := range mounts {
		paths = append(paths, mp)
	}
	sort.Slice(paths, func(i, j int) bool { return len(paths[i]) > len(paths[j]) })
	for _, mp := range paths {
		if path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/") {
			return prefix + mounts[mp] + strings.TrimPrefix(path, mp)
		}
	}
	return arg
}
