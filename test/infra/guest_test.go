package infra_test

import (
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rackcache/rackcache/test/framework"
)

// The job for TestGuestNVMeTCPLoopback: a kernel nvmet-tcp target in the
// guest, on a brd RAM disk, listening on the guest's own 127.0.0.1, and the
// kernel initiator (nvme-cli) connecting to it. This is the reference that
// rackcache's own target is compared with.
const nvmeLoopbackJob = `set -eu
NQN=nqn.2026-11.io.rackcache:guest-reference
cfg=/sys/kernel/config/nvmet

modprobe brd rd_nr=1 rd_size=16384   # one 16 MiB RAM disk, /dev/ram0
modprobe nvmet-tcp
mkdir "$cfg/subsystems/$NQN"
echo 1 >"$cfg/subsystems/$NQN/attr_allow_any_host"
mkdir "$cfg/subsystems/$NQN/namespaces/1"
echo -n /dev/ram0 >"$cfg/subsystems/$NQN/namespaces/1/device_path"
echo 1 >"$cfg/subsystems/$NQN/namespaces/1/enable"
mkdir "$cfg/ports/1"
echo tcp >"$cfg/ports/1/addr_trtype"
echo ipv4 >"$cfg/ports/1/addr_adrfam"
echo 127.0.0.1 >"$cfg/ports/1/addr_traddr"
echo 4420 >"$cfg/ports/1/addr_trsvcid"
ln -s "$cfg/subsystems/$NQN" "$cfg/ports/1/subsystems/$NQN"

echo "--- discover"
nvme discover -t tcp -a 127.0.0.1 -s 4420
echo "--- end discover"
nvme connect -t tcp -a 127.0.0.1 -s 4420 -n "$NQN"

dev="$(wait_dev "$NQN")"
[ -n "$dev" ] || { echo "no block device for $NQN"; exit 1; }
echo "device=$dev"
echo "device-size=$(blockdev --getsize64 "$dev")"

# O_DIRECT both ways, so the data really crosses NVMe/TCP and the page cache
# cannot answer the read.
dd if=/job/pattern of="$dev" bs=1M count=4 oflag=direct conv=fsync 2>/dev/null
echo "readback-md5=$(dd if="$dev" bs=1M count=4 iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1)"
echo "backing-md5=$(dd if=/dev/ram0 bs=1M count=4 iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1)"

nvme disconnect -n "$NQN"
i=0
while [ -e "$dev" ] && [ $i -lt 50 ]; do sleep 0.2; i=$((i + 1)); done
if [ -e "$dev" ]; then echo "device-gone=no"; else echo "device-gone=yes"; fi
echo "subsystems-left=$(ls /sys/class/nvme-subsystem | wc -l)"
`

func TestGuestNVMeTCPLoopback(t *testing.T) {
	dir := t.TempDir()
	pattern := make([]byte, 4<<20)
	if _, err := rand.Read(pattern); err != nil {
		t.Fatal(err)
	}
	patternFile := filepath.Join(dir, "pattern")
	if err := os.WriteFile(patternFile, pattern, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(pattern)
	want := hex.EncodeToString(sum[:])

	res := framework.RunGuest(t, framework.GuestOptions{
		Script:  framework.GuestNVMeFunctions + nvmeLoopbackJob,
		Files:   map[string]string{patternFile: "/job/pattern"},
		Timeout: 4 * time.Minute,
	})
	if res.ExitCode != 0 {
		t.Fatalf("guest job exited with status %d", res.ExitCode)
	}

	discover, _, ok := strings.Cut(res.Output, "--- end discover")
	if !ok {
		t.Fatalf("no discovery output")
	}
	if !regexp.MustCompile(`(?m)^subnqn:\s+nqn\.2026-11\.io\.rackcache:guest-reference\s*$`).MatchString(discover) {
		t.Errorf("discovery log does not list the subsystem:\n%s", discover)
	}
	if !regexp.MustCompile(`(?m)^trsvcid:\s+4420\s*$`).MatchString(discover) ||
		!regexp.MustCompile(`(?m)^traddr:\s+127\.0\.0\.1\s*$`).MatchString(discover) {
		t.Errorf("discovery log lacks the listener 127.0.0.1:4420:\n%s", discover)
	}

	vals := framework.GuestValues(t, res.Output)
	if !regexp.MustCompile(`^/dev/nvme[0-9]+n1$`).MatchString(vals["device"]) {
		t.Errorf("device = %q, want /dev/nvmeXn1", vals["device"])
	}
	if got := vals["device-size"]; got != fmt.Sprint(16<<20) {
		t.Errorf("namespace size = %s, want %d (the RAM disk's)", got, 16<<20)
	}
	if got := vals["readback-md5"]; got != want {
		t.Errorf("read back through NVMe/TCP: md5 %s, want %s (the pattern's)", got, want)
	}
	if got := vals["backing-md5"]; got != want {
		t.Errorf("target's RAM disk: md5 %s, want %s (the pattern's)", got, want)
	}
	if got := vals["device-gone"]; got != "yes" {
		t.Errorf("device gone after disconnect = %q, want yes", got)
	}
	if got := vals["subsystems-left"]; got != "0" {
		t.Errorf("nvme subsystems left after disconnect = %q, want 0", got)
	}
}

// tokenServer answers every connection on 127.0.0.1 with a token and counts
// the connections.
type tokenServer struct {
	ln    net.Listener
	token string
	mu    sync.Mutex
	conns []string // remote addresses, in order
}

func startTokenServer(t *testing.T) *tokenServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	s := &tokenServer{ln: ln, token: hex.EncodeToString(b)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c.RemoteAddr().String())
			s.mu.Unlock()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			_, _ = fmt.Fprintf(c, "%s\n", s.token)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return s
}

func (s *tokenServer) port() int { return s.ln.Addr().(*net.TCPAddr).Port }

func (s *tokenServer) connections() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.conns...)
}

// TestGuestNetworkForwardingAndIsolation checks, in one boot, that the guest
// reaches a host service through guestfwd, and reaches nothing else: not the
// host through slirp's host alias (which without restrict=on leads to the
// host's loopback), not slirp's DNS forwarder, not the outside world.
func TestGuestNetworkForwardingAndIsolation(t *testing.T) {
	srv := startTokenServer(t)
	const guestPort = 7100
	job := fmt.Sprintf(`set -u
echo "forwarded=$(timeout 10 nc 10.0.3.100 %[1]d </dev/null)"
probe() {
	out="$(timeout 5 nc "$2" "$3" </dev/null)"
	rc=$?
	echo "$1-status=$rc"
	echo "$1-bytes=$(printf %%s "$out" | wc -c)"
}
probe slirp-host 10.0.3.2 %[2]d
probe slirp-dns 10.0.3.3 53
probe test-net 192.0.2.1 80
`, guestPort, srv.port())

	res := framework.RunGuest(t, framework.GuestOptions{
		Script:        job,
		GuestForwards: map[int]int{guestPort: srv.port()},
		Timeout:       3 * time.Minute,
	})
	if res.ExitCode != 0 {
		t.Fatalf("guest job exited with status %d", res.ExitCode)
	}
	vals := framework.GuestValues(t, res.Output)
	if got := vals["forwarded"]; got != srv.token {
		t.Errorf("through guestfwd the guest read %q, want the token %q", got, srv.token)
	}
	for _, probe := range []string{"slirp-host", "slirp-dns", "test-net"} {
		status, ok := vals[probe+"-status"]
		if !ok {
			t.Errorf("%s: probe did not run", probe)
			continue
		}
		if status == "0" {
			t.Errorf("%s: the guest connected (nc exited 0); restrict=on should forbid it", probe)
		}
		if got := vals[probe+"-bytes"]; got != "0" {
			t.Errorf("%s: the guest received %s bytes, want 0", probe, got)
		}
	}
	// Only the guestfwd connection (from socat, on the host's loopback)
	// reached the listener; one through 10.0.3.2 would be a second.
	conns := srv.connections()
	if len(conns) != 1 {
		t.Fatalf("host listener saw %d connections %v, want exactly 1 (the guestfwd one)", len(conns), conns)
	}
	if host, _, _ := net.SplitHostPort(conns[0]); host != "127.0.0.1" {
		t.Errorf("guestfwd connection came from %s, want 127.0.0.1", conns[0])
	}
}
