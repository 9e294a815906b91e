package infra_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"

	"github.com/rackcache/rackcache/test/framework"
)

// connect opens a RADOS connection as user with key, reading no ceph.conf (so
// no admin keyring is in reach): only the monitor address and the key.
func connect(t *testing.T, c *framework.Ceph, user, key string) (*rados.Conn, error) {
	t.Helper()
	conn, err := rados.NewConnWithUser(user)
	if err != nil {
		return nil, err
	}
	for k, v := range map[string]string{
		"mon_host":             c.MonHost,
		"key":                  key,
		"client_mount_timeout": "15",
		"rados_mon_op_timeout": "15",
		"rados_osd_op_timeout": "15",
		"ms_bind_ipv6":         "false",
		"auth_client_required": "cephx",
		"log_to_stderr":        "false",
		"err_to_stderr":        "false",
	} {
		if err := conn.SetConfigOption(k, v); err != nil {
			return nil, err
		}
	}
	if err := conn.Connect(); err != nil {
		conn.Shutdown()
		return nil, err
	}
	return conn, nil
}

func TestCephRBDAsRestrictedUser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := framework.StartCeph(t)

	conn, err := connect(t, c, c.User, c.Key)
	if err != nil {
		t.Fatalf("connect as client.%s: %v", c.User, err)
	}
	defer conn.Shutdown()

	ioctx, err := conn.OpenIOContext(c.Pool)
	if err != nil {
		t.Fatalf("open pool %s: %v", c.Pool, err)
	}
	defer ioctx.Destroy()

	const size = 64 << 20
	if err := rbd.CreateImage(ioctx, "foundation", size, rbd.NewRbdImageOptions()); err != nil {
		t.Fatalf("create image: %v", err)
	}
	img, err := rbd.OpenImage(ioctx, "foundation", rbd.NoSnapshot)
	if err != nil {
		t.Fatalf("open image: %v", err)
	}
	pattern := bytes.Repeat([]byte("rackcache-"), 104858)[:1<<20]
	for i := range pattern {
		pattern[i] ^= byte(i / 4096)
	}
	if n, err := img.WriteAt(pattern, 3<<20); err != nil || n != len(pattern) {
		t.Fatalf("write 1 MiB at 3 MiB: n=%d err=%v", n, err)
	}
	if err := img.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if err := img.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	// Read back through a fresh handle so nothing comes from librbd's cache.
	img, err = rbd.OpenImage(ioctx, "foundation", rbd.NoSnapshot)
	if err != nil {
		t.Fatalf("reopen image: %v", err)
	}
	defer func() { _ = img.Close() }()
	got := make([]byte, len(pattern))
	if n, err := img.ReadAt(got, 3<<20); err != nil || n != len(got) {
		t.Fatalf("read back: n=%d err=%v", n, err)
	}
	if !bytes.Equal(got, pattern) {
		t.Fatalf("data read back differs from data written")
	}
	gotSize, err := img.GetSize()
	if err != nil || gotSize != size {
		t.Fatalf("image size: got %d (%v), want %d", gotSize, err, size)
	}

	// The same user is refused in a pool it has no caps for.
	if _, err := c.Admin(ctx, "ceph", "osd", "pool", "create", "forbidden", "8", "8"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Admin(ctx, "rbd", "pool", "init", "forbidden"); err != nil {
		t.Fatal(err)
	}
	other, err := conn.OpenIOContext("forbidden")
	if err != nil {
		t.Fatalf("open pool forbidden (opening is allowed, I/O is not): %v", err)
	}
	defer other.Destroy()
	err = rbd.CreateImage(other, "nope", size, rbd.NewRbdImageOptions())
	if !errors.Is(err, rados.ErrPermissionDenied) {
		t.Fatalf("create image in a pool without caps: got %v, want permission denied", err)
	}
}

// TestCephUserWithoutCapsIsRefused: a user that may talk to the monitors but
// has no OSD caps, and a user with a wrong key, are both refused.
func TestCephUserWithoutCapsIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := framework.StartCeph(t)

	if _, err := c.Admin(ctx, "ceph", "auth", "get-or-create", "client.noosd", "mon", "profile rbd"); err != nil {
		t.Fatal(err)
	}
	key, err := c.Admin(ctx, "ceph", "auth", "get-key", "client.noosd")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := connect(t, c, "noosd", strings.TrimSpace(key))
	if err != nil {
		t.Fatalf("connect as client.noosd: %v", err)
	}
	defer conn.Shutdown()
	ioctx, err := conn.OpenIOContext(c.Pool)
	if err != nil {
		t.Fatalf("open pool %s: %v", c.Pool, err)
	}
	defer ioctx.Destroy()
	err = rbd.CreateImage(ioctx, "nope", 1<<20, rbd.NewRbdImageOptions())
	if !errors.Is(err, rados.ErrPermissionDenied) {
		t.Fatalf("create image without osd caps: got %v, want permission denied", err)
	}

	// The right user name with someone else's key does not even connect.
	wrongKey := "AQBZwQJrAAAAABAAVGhpc2lzbm90YXJlYWxrZXk9PQ=="
	if conn, err := connect(t, c, c.User, wrongKey); err == nil {
		conn.Shutdown()
		t.Fatalf("connect with a wrong key succeeded")
	} else if errorCode(err) != -int(syscall.EACCES) {
		t.Fatalf("connect with a wrong key: got %v, want EACCES (cephx refused the key)", err)
	}
}

// errorCode returns the errno a go-ceph error carries, or 0.
func errorCode(err error) int {
	var coded interface{ ErrorCode() int }
	if errors.As(err, &coded) {
		return coded.ErrorCode()
	}
	return 0
}

// TestCephPinnedAndDownLeavesNothing: hack/ceph.sh up --cpus runs every
// daemon on those CPUs only (the benches keep their clients off them), and
// down stops every daemon that up started and removes the cluster's
// directory.
func TestCephPinnedAndDownLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "ceph")
	c, err := framework.NewCeph(ctx, dir, "--cpus", "0")
	if err != nil {
		t.Fatal(err)
	}
	pidFiles, err := filepath.Glob(filepath.Join(dir, "run", "*.pid"))
	if err != nil || len(pidFiles) != 3 {
		_ = c.Stop()
		t.Fatalf("want pid files of mon, mgr and osd, got %v (%v)", pidFiles, err)
	}
	var pids []int
	for _, f := range pidFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("pid file %s: %v", f, err)
		}
		pids = append(pids, pid)
		if cpus := allowedCPUs(t, pid); cpus != "0" {
			t.Errorf("%s: process %d may run on CPUs %q, want only 0", f, pid, cpus)
		}
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists after down (stat: %v)", dir, err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after down (kill 0: %v)", pid, err)
		}
	}
}

// allowedCPUs is the Cpus_allowed_list of a process's main thread.
func allowedCPUs(t *testing.T, pid int) string {
	t.Helper()
	status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatalf("read status of process %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("process %d: no Cpus_allowed_list in its status", pid)
	return ""
}

// TestCephUpRefusesBadCPUList: a --cpus that is not a CPU list is refused
// before anything starts or is written.
func TestCephUpRefusesBadCPUList(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ceph")
	out, err := exec.Command(framework.HackScript("ceph.sh"), "up", dir, "--cpus", "0;reboot").CombinedOutput()
	if err == nil {
		t.Fatalf("up with --cpus '0;reboot' succeeded:\n%s", out)
	}
	if !strings.Contains(string(out), "--cpus: expected a CPU list") {
		t.Errorf("want the --cpus error, got:\n%s", out)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s was created (stat: %v)", dir, err)
	}
}
