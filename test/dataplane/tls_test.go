package dataplane_test

import (
	"fmt"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/rackcache/rackcache/test/framework"
)

// tlsPSK is a fresh TLS PSK in the interchange format (nvme gen-tls-key's):
// hash 01 (SHA-256), a 32-byte key.
func tlsPSK(t *testing.T) string {
	t.Helper()
	return interchangeKey(t, "NVMeTLSkey-1", 1, 32)
}

// The guest job, with tlshd (ktls-utils) serving the kernel's handshake
// requests. The host's PSKs go into the kernel's .nvme keyring as
// nvme-cli puts them (check-tls-key --insert, identity version 0, which
// the 6.12 kernel looks up). In order:
//   - plain TCP to the TLS listener: refused;
//   - TLS with a wrong PSK: the handshake fails;
//   - TLS with the right PSK: write and read back;
//   - plain TCP to the same subsystem's plain listener: refused, since the
//     host has a PSK;
//   - TLS and DH-HMAC-CHAP together, to a second subsystem: without the
//     DH-HMAC-CHAP key refused, with it write and read back.
const tlsJob = `set -u
A=%[1]s; S=%[2]d; PLAIN=%[3]d; NQN=%[4]s; NQN2=%[5]s
PSK=%[6]s; WRONG=%[7]s; PSK2=%[8]s; HK=%[9]s
HOSTNQN="$(cat /etc/nvme/hostnqn)"
for m in tls gcm ghash_generic; do modprobe $m || echo "modprobe-$m=failed"; done
tlshd --stderr >/tmp/tlshd.log 2>&1 &
sleep 1
insert() { nvme check-tls-key --keydata="$1" --hostnqn="$HOSTNQN" --subsysnqn="$2" --identity=0 --insert >/dev/null; }
ctrl_of() { for c in /sys/class/nvme/nvme*; do [ "$(cat $c/subsysnqn 2>/dev/null)" = "$1" ] && echo $c; done; }
nvme connect -t tcp -a $A -s $S -n $NQN >/tmp/plain 2>&1
echo "plain-connect=$?"
echo "plain-devices=$(find_dev $NQN | wc -l)"
insert "$WRONG" $NQN; echo "insert-wrong=$?"
nvme connect -t tcp -a $A -s $S -n $NQN --tls >/tmp/wrong 2>&1
echo "wrong-connect=$?"
echo "wrong-devices=$(find_dev $NQN | wc -l)"
insert "$PSK" $NQN; echo "insert=$?"
nvme connect -t tcp -a $A -s $S -n $NQN --tls
echo "connect=$?"
dev="$(wait_dev $NQN)"
if [ -n "$dev" ]; then
	ctrl=$(ctrl_of $NQN)
	echo "tls-key=$(cat $ctrl/tls_key 2>/dev/null)"
	dd if=/job/data of="$dev" bs=1M count=4 oflag=direct 2>/dev/null
	echo "write=$?"
	echo "read=$(dd if="$dev" bs=1M count=4 iflag=direct 2>/dev/null | md5sum | cut -c1-32)"
	nvme disconnect -n $NQN >/dev/null
	echo "disconnect=$?"
fi
nvme connect -t tcp -a $A -s $PLAIN -n $NQN >/tmp/plain2 2>&1
echo "plain-listener-connect=$?"
echo "plain-listener-devices=$(find_dev $NQN | wc -l)"
insert "$PSK2" $NQN2; echo "insert2=$?"
nvme connect -t tcp -a $A -s $S -n $NQN2 --tls >/tmp/nodhchap 2>&1
echo "nodhchap-connect=$?"
echo "nodhchap-devices=$(find_dev $NQN2 | wc -l)"
nvme connect -t tcp -a $A -s $S -n $NQN2 --tls --dhchap-secret=$HK
echo "both-connect=$?"
dev="$(wait_dev $NQN2)"
if [ -n "$dev" ]; then
	dd if=/job/data of="$dev" bs=1M count=4 oflag=direct 2>/dev/null
	echo "both-write=$?"
	echo "both-read=$(dd if="$dev" bs=1M count=4 iflag=direct 2>/dev/null | md5sum | cut -c1-32)"
	nvme disconnect -n $NQN2 >/dev/null
	echo "both-disconnect=$?"
fi
echo "--- tlshd"; cat /tmp/tlshd.log | tail -20
`

// The kernel host (6.12 with tlshd) reaches volumes over NVMe/TCP's secure
// channel: TLS 1.3 with a PSK, alone and with DH-HMAC-CHAP; a wrong PSK,
// a missing DH-HMAC-CHAP key and plain TCP for a host with a PSK are
// refused.
func TestKernelHostConnectsOverTLS(t *testing.T) {
	t.Parallel() // shares nothing with the other tests: see the package comment
	dp := framework.StartDataplane(t)
	port := framework.FreeLoopbackPort(t)
	plain := framework.FreeLoopbackPort(t)
	hostNQN := framework.GuestHostNQN(t)
	dir := t.TempDir()
	psk, wrong, psk2, hk := tlsPSK(t), tlsPSK(t), tlsPSK(t), dhchapSecret(t, 1, 32)
	addKey(t, dp, dir, "psk0", psk)
	addKey(t, dp, dir, "psk1", psk2)
	addKey(t, dp, dir, "key0", hk)
	const tlsNQN, bothNQN = "nqn.2026-11.io.rackcache:test-tls", "nqn.2026-11.io.rackcache:test-tls-dhchap"

	// The DH-HMAC-CHAP connect below is the guest kernel's first FFDHE-8192
	// exchange of the boot: instantiating ffdhe8192(dh) runs its crypto
	// self-test, 16 s under TCG on an idle machine and past the default
	// auth_timeout (30 s from Connect) on a loaded one. The target then
	// closes the queue while the host computes, and the 6.12 host, still
	// connecting, does not notice: its Authentication Send times out and
	// nvme connect hangs for minutes. (auth_test's wrong-key connect takes
	// that first exchange there.)
	dp.Call(t, "nvmf_create_transport", map[string]any{"trtype": "TCP", "rackcache_auth_timeout_ms": 120000}, nil)
	for i, nqn := range []string{tlsNQN, bothNQN} {
		bdev := fmt.Sprintf("Malloc%d", i)
		dp.Call(t, "bdev_malloc_create", map[string]any{"name": bdev, "num_blocks": 4096, "block_size": 4096}, nil)
		dp.Call(t, "nvmf_create_subsystem", map[string]any{"nqn": nqn, "serial_number": fmt.Sprintf("RCTLS%d", i)}, nil)
		dp.Call(t, "nvmf_subsystem_add_ns", map[string]any{"nqn": nqn, "namespace": map[string]any{"bdev_name": bdev}}, nil)
		secure := listenerParams(nqn, port)
		secure["secure_channel"] = true
		dp.Call(t, "nvmf_subsystem_add_listener", secure, nil)
	}
	dp.Call(t, "nvmf_subsystem_add_host", map[string]any{"nqn": tlsNQN, "host": hostNQN, "psk": "psk0"}, nil)
	dp.Call(t, "nvmf_subsystem_add_host", map[string]any{
		"nqn": bothNQN, "host": hostNQN, "psk": "psk1", "dhchap_key": "key0",
	}, nil)
	dp.Call(t, "nvmf_subsystem_add_listener", listenerParams(tlsNQN, plain), nil)

	// One address, one setting: a plain listener where a TLS one is bound
	// is refused.
	clash := listenerParams(bothNQN, port)
	if err := dp.Client.Call(t.Context(), "nvmf_subsystem_add_listener", clash, nil); err == nil {
		t.Error("a plain listener on the TLS listener's address was accepted")
	}

	data, dataPath := randomDataFile(t, dir)
	const guestPlainPort = 4422
	job := fmt.Sprintf(tlsJob, guestTargetAddr, guestTargetPort, guestPlainPort, tlsNQN, bothNQN, psk, wrong, psk2, hk)
	res := framework.RunGuest(t, framework.GuestOptions{
		Script:        framework.GuestNVMeFunctions + job,
		Files:         map[string]string{dataPath: "/job/data"},
		GuestForwards: map[int]int{guestTargetPort: port, guestPlainPort: plain},
		Timeout:       4 * time.Minute,
	})
	if res.ExitCode != 0 {
		t.Fatalf("guest job exited with status %d", res.ExitCode)
	}
	v := framework.GuestValues(t, res.Output)
	want := expectedMD5(data)
	for key, expected := range map[string]string{
		"plain-devices":          "0",
		"insert-wrong":           "0",
		"wrong-devices":          "0",
		"insert":                 "0",
		"connect":                "0",
		"write":                  "0",
		"read":                   want,
		"disconnect":             "0",
		"plain-listener-devices": "0",
		"insert2":                "0",
		"nodhchap-devices":       "0",
		"both-connect":           "0",
		"both-write":             "0",
		"both-read":              want,
		"both-disconnect":        "0",
	} {
		if v[key] != expected {
			t.Errorf("%s = %q, want %q", key, v[key], expected)
		}
	}
	for _, key := range []string{"plain-connect", "wrong-connect", "plain-listener-connect", "nodhchap-connect"} {
		if v[key] == "0" || v[key] == "" {
			t.Errorf("%s = %q: the connect should have failed", key, v[key])
		}
	}
	if v["tls-key"] == "" {
		t.Error("the kernel shows no TLS key on the connected controller")
	}

	// The target's account of the refusals.
	raw, err := os.ReadFile(dp.Log)
	if err != nil {
		t.Fatal(err)
	}
	log := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAll(raw, nil)
	for _, want := range []string{
		`connection closed: TLS handshake`,
		`host has a TLS PSK but connected without TLS`,
		`host authenticated \(DH-HMAC-CHAP\)`,
	} {
		if !regexp.MustCompile(want).Match(log) {
			t.Errorf("the target's log has no %q", want)
		}
	}
}
