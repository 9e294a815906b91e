package framework

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Ceph is a running one-node Ceph cluster started by hack/ceph.sh.
type Ceph struct {
	Dir          string // everything the cluster owns lives here
	Conf         string // ceph.conf (carries the admin keyring; for admin CLI calls)
	MonHost      string // mon_host value: [v2:127.0.0.1:P,v1:127.0.0.1:P+1]
	MonV1        string // msgr1 monitor address, host:port
	MonV2        string // msgr2 monitor address, host:port
	Pool         string // RBD pool the client user may use
	User         string // client user name without "client." (caps: profile rbd on Pool)
	Key          string // that user's cephx key
	AdminKeyring string
}

// cephPortSpan is how many consecutive ports hack/ceph.sh uses from --mon-port.
const cephPortSpan = 41

// StartCeph starts a cluster for one test (or a whole suite, when called
// with the suite's testing.TB) and stops it, removing its directory, when the
// test ends.
func StartCeph(t testing.TB) *Ceph {
	t.Helper()
	RequireCommand(t, "ceph-mon")
	dir, err := os.MkdirTemp("", "rackcache-ceph-")
	if err != nil {
		t.Fatalf("make ceph dir: %v", err)
	}
	c, err := NewCeph(context.Background(), dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatalf("start ceph: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop ceph: %v", err)
		}
	})
	return c
}

// NewCeph starts a cluster in dir (empty or absent) on free loopback ports,
// with extra options of hack/ceph.sh up (e.g. "--cpus", "0") added.
// The caller must call Stop. Useful from TestMain, where there is no testing.TB.
func NewCeph(ctx context.Context, dir string, extra ...string) (*Ceph, error) {
	port, err := freePortRange(cephPortSpan)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	args := append([]string{"up", dir, "--mon-port", strconv.Itoa(port)}, extra...)
	cmd := exec.CommandContext(ctx, HackScript("ceph.sh"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("hack/ceph.sh up %s: %w\n%s", dir, err, stderr.String())
	}
	c, err := parseCephEnv(dir, stdout.String())
	if err != nil {
		_ = exec.Command(HackScript("ceph.sh"), "down", dir).Run()
		return nil, err
	}
	// Stop the daemons even if this process dies before Stop is called.
	reap := fmt.Sprintf("[ -d %s ] && %s down %s >/dev/null 2>&1",
		shellQuote(dir), shellQuote(HackScript("ceph.sh")), shellQuote(dir))
	if err := startReaper(reap); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// Stop stops the daemons by PID and removes the cluster's directory.
func (c *Ceph) Stop() error {
	out, err := exec.Command(HackScript("ceph.sh"), "down", c.Dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("hack/ceph.sh down %s: %w\n%s", c.Dir, err, out)
	}
	return nil
}

// Admin runs the ceph CLI (or rbd, with prog "rbd") as client.admin.
func (c *Ceph) Admin(ctx context.Context, prog string, args ...string) (string, error) {
	full := append([]string{"--conf", c.Conf}, args...)
	out, err := exec.CommandContext(ctx, prog, full...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", prog, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func parseCephEnv(dir, env string) (*Ceph, error) {
	vars := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(env))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok {
			vars[k] = v
		}
	}
	c := &Ceph{
		Dir:          dir,
		Conf:         vars["CEPH_CONF"],
		MonHost:      vars["RACKCACHE_CEPH_MON_HOST"],
		MonV1:        vars["RACKCACHE_CEPH_MON_V1"],
		MonV2:        vars["RACKCACHE_CEPH_MON_V2"],
		Pool:         vars["RACKCACHE_CEPH_POOL"],
		User:         vars["RACKCACHE_CEPH_USER"],
		Key:          vars["RACKCACHE_CEPH_KEY"],
		AdminKeyring: vars["RACKCACHE_CEPH_ADMIN_KEYRING"],
	}
	if c.Conf == "" || c.MonHost == "" || c.Key == "" || c.User == "" || c.Pool == "" {
		return nil, fmt.Errorf("hack/ceph.sh printed incomplete settings:\n%s", env)
	}
	return c, nil
}

// freePortRange finds n consecutive free loopback ports and returns the
// first. They lie below the kernel's ephemeral range: a port in it can be
// taken by any outgoing connection between this check and Ceph's bind (a
// monitor that then cannot listen was seen under `make test`'s load).
func freePortRange(n int) (int, error) {
	const low = 20000
	span := ephemeralPortStart() - n - low
	if span < 1000 {
		// An unusual ephemeral range: fall back to the old, racier spread.
		span = 30000
	}
	for attempt := 0; attempt < 50; attempt++ {
		base := low + rand.IntN(span)
		if rangeFree(base, n) {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free ports on 127.0.0.1", n)
}

// ephemeralPortStart is the first port the kernel hands to outgoing
// connections (net.ipv4.ip_local_port_range; Linux's default 32768).
func ephemeralPortStart() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var first int
		if _, err := fmt.Sscan(string(b), &first); err == nil {
			return first
		}
	}
	return 32768
}

func rangeFree(base, n int) bool {
	for p := base; p < base+n; p++ {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			return false
		}
		_ = l.Close()
	}
	return true
}

// UserKeyring writes the client user's key as a Ceph keyring file (what
// the operator's keyring Secret mounts on a cache server) and returns its
// path, for a dataplane's --ceph-keyring.
func (c *Ceph) UserKeyring(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "client."+c.User+".keyring")
	if err := os.WriteFile(path, fmt.Appendf(nil, "[client.%s]\n\tkey = %s\n", c.User, c.Key), 0o600); err != nil {
		t.Fatalf("write the Ceph user keyring: %v", err)
	}
	return path
}
