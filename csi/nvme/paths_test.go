package nvme

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// controllerDir writes a fake sysfs controller with these attributes.
func controllerDir(t *testing.T, root, name string, attrs map[string]string) {
	t.Helper()
	dir := filepath.Join(root, "class", "nvme", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range attrs {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// A new path copies the existing controller's host identity, reconnect
// settings, secrets and TLS; the keep-alive comes from the defaults.
func TestAddPathsCopiesTheExistingController(t *testing.T) {
	root := t.TempDir()
	controllerDir(t, root, "nvme0", map[string]string{
		"subsysnqn": "nqn.other", "state": "live", "hostnqn": "nqn.wrong",
	})
	controllerDir(t, root, "nvme1", map[string]string{
		"subsysnqn": captureNQN, "state": "live", "hostnqn": "nqn.h", "hostid": "id-1",
		"reconnect_delay": "2", "ctrl_loss_tmo": "off",
		"dhchap_secret": "DHHC-1:00:aG9zdA==:", "dhchap_ctrl_secret": "none", "tls_key": "0000abcd",
	})
	f := &fakeNVMe{}
	c := &CLI{Exec: f.exec, SysfsRoot: root}
	defaults := ConnectOptions{HostNQN: "nqn.default", CtrlLossTmo: 600, ReconnectDelay: 5, KeepAliveTmo: 7}
	n, err := c.AddPaths(context.Background(), captureNQN, []Portal{{"10.0.3.100", "4421"}}, defaults)
	if err != nil || n != 1 {
		t.Fatalf("AddPaths: %d, %v", n, err)
	}
	want := "nvme connect -t tcp -a 10.0.3.100 -s 4421 -n " + captureNQN +
		" --hostnqn nqn.h --ctrl-loss-tmo -1 --reconnect-delay 2 --keep-alive-tmo 7 --hostid id-1 --dhchap-secret DHHC-1:00:aG9zdA==: --tls"
	if !reflect.DeepEqual(f.calls, []string{want}) {
		t.Errorf("calls\n%v\nwant\n%v", f.calls, want)
	}

	// Without a controller to copy, nothing is connected.
	if n, err := c.AddPaths(context.Background(), "nqn.none", []Portal{{"10.0.3.100", "4421"}}, defaults); err == nil || n != 0 {
		t.Errorf("no controller: %d, %v", n, err)
	}
	// A failing portal does not stop the next one.
	f = &fakeNVMe{failing: "-s 4422"}
	c.Exec = f.exec
	n, err = c.AddPaths(context.Background(), captureNQN, []Portal{{"10.0.3.100", "4422"}, {"10.0.3.100", "4423"}}, defaults)
	if n != 1 || err == nil || !strings.Contains(err.Error(), "4422") {
		t.Errorf("one failing portal: %d, %v", n, err)
	}
}

// RemovePath disconnects the named controller, and only while it is
// still the subsystem's (a name the kernel gave to another controller
// since is left alone).
func TestRemovePath(t *testing.T) {
	root := t.TempDir()
	controllerDir(t, root, "nvme1", map[string]string{"subsysnqn": captureNQN, "state": "connecting"})
	controllerDir(t, root, "nvme2", map[string]string{"subsysnqn": "nqn.other", "state": "live"})
	f := &fakeNVMe{}
	c := &CLI{Exec: f.exec, SysfsRoot: root}
	for _, name := range []string{"nvme1", "nvme2", "nvme9"} {
		if err := c.RemovePath(context.Background(), captureNQN, name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if want := []string{"nvme disconnect -d nvme1"}; !reflect.DeepEqual(f.calls, want) {
		t.Errorf("calls %v, want %v", f.calls, want)
	}
}
