package config

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/rackcache/rackcache/test/framework"
)

// TestCSIOverlay checks config/csi (through config/default) against the
// rackcache-csi binary and against what the node plugin needs of its host.
func TestCSIOverlay(t *testing.T) {
	objs := buildOverlay(t, "default")
	bin := csiBinary(t)

	drv := typed[storagev1.CSIDriver](t, find(t, objs, "CSIDriver", "csi.rackcache.io"))
	if drv.Spec.AttachRequired == nil || !*drv.Spec.AttachRequired {
		t.Errorf("CSIDriver attachRequired is not true: ControllerPublishVolume is what lets a node's host NQN connect")
	}
	if drv.Spec.RequiresRepublish == nil || !*drv.Spec.RequiresRepublish {
		t.Errorf("CSIDriver requiresRepublish is not true: republishing is how rotated host keys reach a mounted volume")
	}

	t.Run("Controller", func(t *testing.T) {
		dep := typed[appsv1.Deployment](t, find(t, objs, "Deployment", "rackcache-csi-controller"))
		driver := container(t, dep.Spec.Template.Spec, "csi-controller")
		checkArgs(t, bin, driver.Args)
		endpoint := strings.TrimPrefix(argValue(t, driver.Args, "endpoint"), "unix://")
		for _, sidecar := range []string{"csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter"} {
			c := container(t, dep.Spec.Template.Spec, sidecar)
			if got := argValue(t, c.Args, "csi-address"); !sameSocket(got, c, endpoint, driver) {
				t.Errorf("%s talks to %s, the driver listens on %s", sidecar, got, endpoint)
			}
			if !slices.Contains(c.Args, "--leader-election") {
				t.Errorf("%s runs without --leader-election", sidecar)
			}
		}
		probeOnFlagPort(t, driver)
		if dep.Spec.Template.Spec.ServiceAccountName != "rackcache-csi-controller" {
			t.Errorf("controller service account %q", dep.Spec.Template.Spec.ServiceAccountName)
		}
	})

	t.Run("Node", func(t *testing.T) {
		ds := typed[appsv1.DaemonSet](t, find(t, objs, "DaemonSet", "rackcache-csi-node"))
		pod := ds.Spec.Template.Spec
		node := container(t, pod, "csi-node")
		checkArgs(t, bin, node.Args)
		probeOnFlagPort(t, node)
		if node.SecurityContext == nil || node.SecurityContext.Privileged == nil || !*node.SecurityContext.Privileged {
			t.Errorf("node plugin not privileged: it runs nvme connect, mkfs and mount")
		}
		hostPaths := map[string]corev1.VolumeMount{}
		for _, m := range node.VolumeMounts {
			for _, v := range pod.Volumes {
				if v.Name == m.Name && v.HostPath != nil {
					hostPaths[v.HostPath.Path] = m
				}
			}
		}
		for _, p := range []string{"/dev", "/sys", "/etc/nvme", "/var/lib/kubelet", "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins/csi.rackcache.io"} {
			if _, ok := hostPaths[p]; !ok {
				t.Errorf("node plugin does not mount the host's %s", p)
			}
		}
		if m := hostPaths["/var/lib/kubelet"]; m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationBidirectional || m.MountPath != "/var/lib/kubelet" {
			t.Errorf("kubelet dir mounted %+v: the kubelet must see the plugin's mounts (Bidirectional, same path)", m)
		}
		// The registration socket lands in the kubelet's plugins_registry,
		// and the endpoint it announces is where the kubelet finds the
		// driver's socket.
		if reg := hostPaths["/var/lib/kubelet/plugins_registry"]; reg.MountPath != argValue(t, node.Args, "registration-dir") {
			t.Errorf("--registration-dir=%s, the registry is mounted at %s", argValue(t, node.Args, "registration-dir"), reg.MountPath)
		}
		plugin := hostPaths["/var/lib/kubelet/plugins/csi.rackcache.io"]
		endpoint := strings.TrimPrefix(argValue(t, node.Args, "endpoint"), "unix://")
		if filepath.Dir(endpoint) != plugin.MountPath || argValue(t, node.Args, "kubelet-plugin-dir") != "/var/lib/kubelet/plugins/csi.rackcache.io" {
			t.Errorf("endpoint %s not in the plugin dir (mounted at %s), or --kubelet-plugin-dir names another host path", endpoint, plugin.MountPath)
		}
		nodeName := false
		for _, e := range node.Env {
			nodeName = nodeName || (e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName")
		}
		if !nodeName {
			t.Errorf("node plugin not told its node's name ($NODE_NAME from spec.nodeName)")
		}
	})
}

// csiBinary builds cmd/rackcache-csi into the test's temporary dir.
func csiBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rackcache-csi")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/rackcache-csi")
	cmd.Dir = framework.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build cmd/rackcache-csi: %v\n%s", err, out)
	}
	return bin
}

// checkArgs: every argument is a flag the binary parses (the flag package
// parses all of them before --help ends it with status 0; an unknown flag
// or bad value exits 2).
func checkArgs(t *testing.T, bin string, args []string) {
	t.Helper()
	if out, err := exec.Command(bin, append(slices.Clone(args), "--help")...).CombinedOutput(); err != nil {
		t.Errorf("rackcache-csi %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func container(t *testing.T, pod corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range pod.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

// argValue is the value of --name=value in args.
func argValue(t *testing.T, args []string, name string) string {
	t.Helper()
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	t.Errorf("no --%s in %v", name, args)
	return ""
}

// sameSocket: the sidecar's socket path and the driver's endpoint are the
// same file of a volume both mount.
func sameSocket(addr string, sidecar corev1.Container, endpoint string, driver corev1.Container) bool {
	vol := func(c corev1.Container, path string) string {
		for _, m := range c.VolumeMounts {
			if filepath.Dir(path) == m.MountPath {
				return m.Name
			}
		}
		return ""
	}
	return filepath.Base(addr) == filepath.Base(endpoint) && vol(sidecar, addr) != "" && vol(sidecar, addr) == vol(driver, endpoint)
}

// probeOnFlagPort: the liveness probe asks /healthz on --probe-listen's
// port.
func probeOnFlagPort(t *testing.T, c corev1.Container) {
	t.Helper()
	_, port, _ := strings.Cut(argValue(t, c.Args, "probe-listen"), ":")
	want, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("--probe-listen port %q", port)
	}
	p := c.LivenessProbe
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Fatalf("%s liveness probe %+v, want HTTP /healthz", c.Name, p)
	}
	if got := containerPort(t, c, p.HTTPGet.Port); got != want {
		t.Errorf("%s liveness probe on port %d, --probe-listen binds %d", c.Name, got, want)
	}
}
