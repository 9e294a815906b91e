package dataplane_test

import (
	"crypto/md5"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rackcache/rackcache/test/framework"
)

// dhchapSecret is a fresh DH-HMAC-CHAP secret in the DHHC-1 format
// (nvme gen-dhchap-key's).
func dhchapSecret(t *testing.T, hashID, size int) string {
	t.Helper()
	return interchangeKey(t, "DHHC-1", hashID, size)
}

// interchangeKey is a fresh key of size random bytes in an NVMe
// interchange format: prefix, hash id, base64 of the key and its CRC-32.
func interchangeKey(t *testing.T, prefix string, hashID, size int) string {
	t.Helper()
	key := make([]byte, size, size+4)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	key = binary.LittleEndian.AppendUint32(key, crc32.ChecksumIEEE(key))
	return fmt.Sprintf("%s:%02d:%s:", prefix, hashID, base64.StdEncoding.EncodeToString(key))
}

// randomDataFile writes 4 MiB of random bytes to dir/data for a guest job
// (run.sh --file); returns them and the file's path.
func randomDataFile(t *testing.T, dir string) ([]byte, string) {
	t.Helper()
	data := make([]byte, 4<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "data")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return data, path
}

// addKey writes secret to a 0600 file in dir and adds it to the
// dataplane's keyring as name.
func addKey(t *testing.T, dp *framework.Dataplane, dir, name, secret string) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dp.Call(t, "keyring_file_add_key", map[string]any{"name": name, "path": path}, nil)
}

// The guest job: connect without a key and with a wrong one (both
// refused, no device), then with the right host and controller keys
// (bidirectional): write and read back; then, with I/O running, wait for
// the host test's signal that the target rotated both keys, hand the new
// keys to the kernel as the CSI node plugin does (the controller key, then
// the host key: the first re-authentication, with the old host key, fails
// and leaves the queues as they were; the second re-authenticates every
// queue) and read everything back; disconnect.
const authJob = `set -u
A=%[1]s; S=%[2]d; NQN=%[3]s; SIG=%[4]d
HK=%[5]s; CK=%[6]s; WRONG=%[7]s; HK2=%[8]s; CK2=%[9]s
nvme connect -t tcp -a $A -s $S -n $NQN >/tmp/nokey 2>&1
echo "nokey-connect=$?"
echo "nokey-devices=$(find_dev $NQN | wc -l)"
nvme connect -t tcp -a $A -s $S -n $NQN --dhchap-secret=$WRONG >/tmp/wrong 2>&1
echo "wrongkey-connect=$?"
echo "wrongkey-devices=$(find_dev $NQN | wc -l)"
nvme connect -t tcp -a $A -s $S -n $NQN --nr-io-queues=2 --dhchap-secret=$HK --dhchap-ctrl-secret=$CK
echo "connect=$?"
dev="$(wait_dev $NQN)"
[ -n "$dev" ] || { echo "device=none"; exit 0; }
ctrl=""
for c in /sys/class/nvme/nvme*; do
	[ "$(cat $c/subsysnqn 2>/dev/null)" = "$NQN" ] && ctrl=$c
done
echo "queues=$(cat $ctrl/queue_count)"
dd if=/job/data of="$dev" bs=1M count=4 oflag=direct 2>/dev/null
echo "write=$?"
echo "first=$(dd if="$dev" bs=1M count=4 iflag=direct 2>/dev/null | md5sum | cut -c1-32)"
# I/O from both CPUs (so on both I/O queues) while the keys change: the
# same data over the same 4 MiB.
( i=0; while [ $i -lt 20 ]; do
	taskset -c $((i %% 2)) dd if=/job/data of="$dev" bs=1M count=4 oflag=direct 2>/dev/null || echo "rotation-io-error=$i"
	i=$((i + 1)); done ) &
io=$!
echo "rotate-signal=$(nc $A $SIG </dev/null)"
# Both keys, in the CSI node plugin's order (csi/nvme SetKeys).
echo "$CK2" > $ctrl/dhchap_ctrl_secret
echo "ctrl-secret-write=$?"
echo "$HK2" > $ctrl/dhchap_secret
echo "secret-write=$?"
wait $io
sleep 2
echo "state=$(cat $ctrl/state)"
echo "after=$(dd if="$dev" bs=1M count=4 iflag=direct 2>/dev/null | md5sum | cut -c1-32)"
nvme disconnect -n $NQN >/dev/null
echo "disconnect=$?"
`

// A host with DH-HMAC-CHAP keys: the kernel initiator (6.12) is refused
// without a key and with a wrong one, authenticates both ways with the
// right ones, and re-authenticates every queue with a rotated key while
// I/O runs.
func TestKernelHostAuthenticatesWithDHHMACCHAP(t *testing.T) {
	t.Parallel() // shares nothing with the other tests: see the package comment
	dp := framework.StartDataplane(t)
	port := framework.FreeLoopbackPort(t)
	hostNQN := framework.GuestHostNQN(t)
	dir := t.TempDir()
	hk, ck, hk2, ck2 := dhchapSecret(t, 1, 32), dhchapSecret(t, 3, 64), dhchapSecret(t, 2, 48), dhchapSecret(t, 1, 32)
	wrong := dhchapSecret(t, 1, 32)
	addKey(t, dp, dir, "key0", hk)
	addKey(t, dp, dir, "ckey0", ck)
	addKey(t, dp, dir, "key1", hk2)
	addKey(t, dp, dir, "ckey1", ck2)

	dp.Call(t, "bdev_malloc_create", map[string]any{"name": "Malloc0", "num_blocks": 4096, "block_size": 4096}, nil)
	// The guest kernel's first FFDHE-8192 exchange of the boot runs the
	// algorithm's crypto self-test: 16 s under TCG on an idle machine, past
	// the default auth_timeout (30 s) on a loaded one, and a 6.12 host
	// whose queue is closed while it computes hangs in nvme connect for
	// minutes (see tls_test.go).
	dp.Call(t, "nvmf_create_transport", map[string]any{"trtype": "TCP", "rackcache_auth_timeout_ms": 120000}, nil)
	dp.Call(t, "nvmf_create_subsystem", map[string]any{"nqn": mallocNQN, "serial_number": "RCAUTH"}, nil)
	dp.Call(t, "nvmf_subsystem_add_ns", map[string]any{"nqn": mallocNQN, "namespace": map[string]any{"bdev_name": "Malloc0"}}, nil)
	dp.Call(t, "nvmf_subsystem_add_host", map[string]any{
		"nqn": mallocNQN, "host": hostNQN, "dhchap_key": "key0", "dhchap_ctrlr_key": "ckey0",
	}, nil)
	dp.Call(t, "nvmf_subsystem_add_listener", listenerParams(mallocNQN, port), nil)

	// The guest asks for the rotation by connecting here; the answer
	// comes once the target has the new key.
	sig, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sig.Close() }()
	rotated := make(chan error, 1)
	go func() {
		c, err := sig.Accept()
		if err != nil {
			rotated <- err
			return
		}
		defer func() { _ = c.Close() }()
		// Before the rotation every queue shows its authentication as
		// SPDK's nvmf_subsystem_get_qpairs does.
		var qpairs []struct {
			Qid  int `json:"qid"`
			Auth struct {
				State   string `json:"state"`
				Digest  string `json:"digest"`
				DHGroup string `json:"dhgroup"`
			} `json:"auth"`
		}
		if err := dp.Client.Call(t.Context(), "nvmf_subsystem_get_qpairs", map[string]any{"nqn": mallocNQN}, &qpairs); err != nil {
			rotated <- err
			return
		}
		for _, q := range qpairs {
			if q.Auth.State != "completed" || q.Auth.Digest != "sha512" || q.Auth.DHGroup != "ffdhe8192" {
				rotated <- fmt.Errorf("qpair %d: auth %+v, want completed with sha512 and ffdhe8192", q.Qid, q.Auth)
				return
			}
		}
		if len(qpairs) != 3 {
			rotated <- fmt.Errorf("%d qpairs, want 3", len(qpairs))
			return
		}
		err = dp.Client.Call(t.Context(), "nvmf_subsystem_set_keys", map[string]any{
			"nqn": mallocNQN, "host": hostNQN, "dhchap_key": "key1", "dhchap_ctrlr_key": "ckey1",
		}, nil)
		if err == nil {
			_, err = c.Write([]byte("rotated\n"))
		}
		rotated <- err
	}()

	data, dataPath := randomDataFile(t, dir)
	const guestSignalPort = 4421
	job := fmt.Sprintf(authJob, guestTargetAddr, guestTargetPort, mallocNQN, guestSignalPort, hk, ck, wrong, hk2, ck2)
	res := framework.RunGuest(t, framework.GuestOptions{
		Script:        framework.GuestNVMeFunctions + job,
		Files:         map[string]string{dataPath: "/job/data"},
		GuestForwards: map[int]int{guestTargetPort: port, guestSignalPort: sig.Addr().(*net.TCPAddr).Port},
		Timeout:       4 * time.Minute,
	})
	if res.ExitCode != 0 {
		t.Fatalf("guest job exited with status %d", res.ExitCode)
	}
	select {
	case err := <-rotated:
		if err != nil {
			t.Fatalf("rotation: %v", err)
		}
	default:
		t.Fatal("the guest never asked for the rotation")
	}
	v := framework.GuestValues(t, res.Output)
	want := expectedMD5(data)
	for key, expected := range map[string]string{
		"nokey-devices":     "0",
		"wrongkey-devices":  "0",
		"connect":           "0",
		"queues":            "3",
		"write":             "0",
		"first":             want,
		"rotate-signal":     "rotated",
		"secret-write":      "0",
		"ctrl-secret-write": "0",
		"state":             "live",
		"disconnect":        "0",
	} {
		if v[key] != expected {
			t.Errorf("%s = %q, want %q", key, v[key], expected)
		}
	}
	for _, key := range []string{"nokey-connect", "wrongkey-connect"} {
		if v[key] == "0" || v[key] == "" {
			t.Errorf("%s = %q: the connect should have failed", key, v[key])
		}
	}
	if strings.Contains(res.Output, "rotation-io-error") {
		t.Errorf("I/O failed while the key rotated:\n%s", res.Output)
	}
	if v["after"] != want {
		t.Errorf("after the rotation the device reads %s, want %s", v["after"], want)
	}

	// The target's account: every queue of the good connect authenticated
	// (admin and two I/O queues), then re-authenticated with the new key;
	// the two refused connects failed at authentication.
	raw, err := os.ReadFile(dp.Log)
	if err != nil {
		t.Fatal(err)
	}
	log := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAll(raw, nil)
	first := regexp.MustCompile(`host authenticated \(DH-HMAC-CHAP\).*reauthentication=false`).FindAll(log, -1)
	again := regexp.MustCompile(`host authenticated \(DH-HMAC-CHAP\).*reauthentication=true`).FindAll(log, -1)
	if len(first) != 3 || len(again) != 3 {
		t.Errorf("authentications: %d first, %d re-authentications; want 3 and 3", len(first), len(again))
	}
	// The wrong key's queue got nothing: its authentication failed (or,
	// should the TCG guest's first FFDHE-8192 outlast even the raised
	// auth_timeout, it was closed unauthenticated).
	if !regexp.MustCompile(`DH-HMAC-CHAP authentication failed|no DH-HMAC-CHAP authentication within auth_timeout`).Match(log) {
		t.Errorf("the wrong key's refusal is not in the target's log")
	}
}

// expectedMD5 is the hex md5 of b, as the guest's md5sum prints it.
func expectedMD5(b []byte) string {
	return fmt.Sprintf("%x", md5.Sum(b))
}
