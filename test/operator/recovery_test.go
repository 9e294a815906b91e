package operator

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	rcv1 "github.com/rackcache/rackcache/api/v1alpha1"
	"github.com/rackcache/rackcache/test/framework"
	"github.com/rackcache/rackcache/test/framework/standin"
)

// guestTargetPort is where the guest reaches the cache server: its
// 10.0.3.100:guestTargetPort is forwarded to the server's address and the
// pool's NVMe/TCP port.
const guestTargetPort = 4420

// writtenMiB is how much the guest writes, at the start of the volume.
const writtenMiB = 8

// The guest job: one boot for the whole write-back life cycle. It writes
// the data, then the host kills the dataplane twice (`step`), once keeping
// its persisted configuration and once without it; after each restart the
// kernel reconnects (I/O waits meanwhile) and the job reads the data back.
// Then it disconnects and the host deletes the volume.
const lifecycleJob = `set -u
A=10.0.3.100; S=%[1]d; NQN=%[2]s; MIB=%[3]d; TLS=%[4]t
# Kernel messages stay in dmesg: on the console they could split our lines.
echo 1 > /proc/sys/kernel/printk
# The pool authenticates hosts: the host's keys, read from the operator's
# Secret by the test, as the kubelet hands them to the CSI node plugin.
tls=""
if [ "$TLS" = true ]; then
	# A TLS pool: tlshd makes the handshakes, with the PSK nvme-cli puts
	# into the kernel's keyring (as the CSI node plugin does).
	for m in tls gcm ghash_generic; do modprobe $m; done
	tlshd --stderr >/tmp/tlshd.log 2>&1 &
	nvme check-tls-key --keydata="$(cat /job/psk.key)" --hostnqn="$(cat /etc/nvme/hostnqn)" --subsysnqn=$NQN --identity=0 --insert >/dev/null
	echo "insert-psk=$?"
	tls=--tls
fi
nvme connect -t tcp -a $A -s $S -n $NQN --nr-io-queues=2 --reconnect-delay=1 --ctrl-loss-tmo=600 $tls \
  --dhchap-secret="$(cat /job/host.key)" --dhchap-ctrl-secret="$(cat /job/ctrl.key)"
echo "connect=$?"
dev="$(wait_dev $NQN)"
echo "device=$dev"
[ -n "$dev" ] || exit 1
sum() { dd if="$dev" bs=1M count=$MIB iflag=direct 2>/dev/null | md5sum | cut -c1-32; }
dd if=/job/data of="$dev" bs=64k count=$((MIB * 16)) oflag=direct conv=notrunc 2>/dev/null
echo "write=$?"
echo "sum-written=$(sum)"
step written >/dev/null
echo "step-written=$?"
step kill-restart >/dev/null
echo "step-kill-restart=$?"
echo "sum-after-restart=$(sum)"
step kill-forget-config >/dev/null
echo "step-kill-forget-config=$?"
echo "sum-after-forget=$(sum)"
nvme disconnect -n $NQN >/dev/null
echo "disconnect=$?"
step delete >/dev/null
echo "step-delete=$?"
`

var _ = Describe("A write-back CachedVolume written by a guest", func() {
	It("keeps its cache data across kill -9 (with and without the persisted configuration), and deletion flushes every byte to Ceph", func(ctx SpecContext) {
		lifeCycleWithRetries(ctx, false)
	})
	It("does the same over TLS (dataPath.tls: a PSK per host from the operator, tlshd in the guest)", func(ctx SpecContext) {
		lifeCycleWithRetries(ctx, true)
	})
})

// lifeCycleWithRetries runs writeBackLifeCycle, starting over when the
// guest's kernel (not the target) failed.
func lifeCycleWithRetries(ctx SpecContext, tls bool) {
	GinkgoHelper()
	for attempt := 1; ; attempt++ {
		oops := writeBackLifeCycle(ctx, lifeCycleNameOf(tls, attempt))
		if oops == "" {
			return
		}
		// The guest kernel, not the target, failed: the stock 6.1
		// kernel's NVMe/TCP initiator has a race in its error
		// recovery as the target dies mid-I/O (docs/development.md).
		// A fresh start (new pool, server, volume and guest), up to
		// framework.InitiatorCrashAttempts attempts.
		if attempt == framework.InitiatorCrashAttempts {
			Fail(fmt.Sprintf("the guest kernel crashed in its NVMe/TCP initiator in %d attempts in a row:\n%s", attempt, oops))
		}
		GinkgoWriter.Printf("attempt %d: the guest kernel crashed in its NVMe/TCP initiator as the target died (report above); starting over\n", attempt)
	}
}

// lifeCycleName names what one attempt of the life cycle creates.
type lifeCycleName struct {
	pool, node, ip, rack string
	tls                  bool
}

// lifeCycleNameOf names attempt's objects (from 1): an attempt's objects
// stay until the spec ends, so a fresh start takes new ones, and a server
// address of its own (127.0.0.5, then from 127.0.0.8 on; over TLS
// 127.0.0.11, then from 127.0.0.13 on).
func lifeCycleNameOf(tls bool, attempt int) lifeCycleName {
	prefix, first, base := "wb", 5, 6
	if tls {
		prefix, first, base = "tls", 11, 11
	}
	if attempt == 1 {
		return lifeCycleName{pool: prefix, node: prefix + "-1", ip: fmt.Sprintf("127.0.0.%d", first), rack: "rack-" + prefix, tls: tls}
	}
	pool := fmt.Sprintf("%s%d", prefix, attempt)
	return lifeCycleName{pool: pool, node: pool + "-1", ip: fmt.Sprintf("127.0.0.%d", base+attempt), rack: "rack-" + pool, tls: tls}
}

// writeBackLifeCycle runs the guest job against a fresh pool, server and
// volume; it returns the guest kernel's crash report if its NVMe/TCP
// initiator crashed (nothing is checked then), else "" once every check
// passed.
func writeBackLifeCycle(ctx SpecContext, n lifeCycleName) string {
	pool := createPool(ctx, poolInput{Name: n.pool, WriteMode: rcv1.WriteBack, TLS: n.tls})
	srv := cluster.StartServer(ctx, standin.ServerInput{Pool: pool, Node: n.node, IP: n.ip, Rack: n.rack, CacheMiB: 128})
	cluster.SyncDaemonSetStatus(ctx, pool, 1)
	waitPoolReady(ctx, pool.Name, 1)

	hostNQN := framework.GuestHostNQN(GinkgoTB())
	vol := createVolume(ctx, volumeInput{Name: n.pool + "-vol", Pool: pool, SizeMiB: 64, CacheSize: "32Mi", AllowedHosts: []string{hostNQN}})
	v := waitVolumeReady(ctx, vol.Name)
	Expect(v.Status.WriteMode).To(Equal(rcv1.WriteBack))
	Expect(v.Status.Server).To(Equal(srv.In.Node))
	nqn := v.Status.NQN
	var cached string
	Eventually(func(g Gomega) {
		cached = expectServes(g, ctx, srv, nqn, []string{hostNQN}, "wb").Name
	}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())

	dir := GinkgoT().TempDir()
	keys := hostKeysOf(ctx, vol.Name, hostNQN)
	Expect(os.WriteFile(filepath.Join(dir, "host.key"), []byte(keys.Host), 0o600)).To(Succeed())
	Expect(os.WriteFile(filepath.Join(dir, "ctrl.key"), []byte(keys.Ctrl), 0o600)).To(Succeed())
	Expect(keys.PSK != "").To(Equal(n.tls), "a TLS PSK exactly when the pool uses TLS")
	Expect(os.WriteFile(filepath.Join(dir, "psk.key"), []byte(keys.PSK), 0o600)).To(Succeed())
	data := make([]byte, writtenMiB<<20)
	_, err := rand.Read(data)
	Expect(err).NotTo(HaveOccurred())
	for i := range data {
		data[i] |= 1 // never a zero byte: zeroes read back are never data
	}
	Expect(os.WriteFile(filepath.Join(dir, "data"), data, 0o644)).To(Succeed())
	sum := md5.Sum(data)
	wantSum := hex.EncodeToString(sum[:])

	// dirty is the cached bdev's dirty bytes as the dataplane reports it.
	dirty := func(g Gomega) uint64 {
		st, err := srv.DP.Client.CachedBdevStats(ctx, cached)
		g.Expect(err).NotTo(HaveOccurred())
		return st.DirtyBytes
	}
	// servedAgain waits until the volume is Ready and served by the
	// restarted dataplane, its write-back data still dirty in the cache.
	servedAgain := func(what string) {
		Eventually(func(g Gomega) {
			v := getVolume(g, ctx, vol.Name)
			g.Expect(v.Status.Phase).To(Equal(rcv1.VolumeReady), "phase; conditions %v", v.Status.Conditions)
			g.Expect(v.Status.Server).To(Equal(srv.In.Node))
			b := expectServes(g, ctx, srv, nqn, []string{hostNQN}, "wb")
			g.Expect(b.Name).To(Equal(cached))
			g.Expect(dirty(g)).To(BeNumerically(">", 0), "dirty bytes of %s", cached)
		}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed(), "after %s", what)
	}

	handle := func(step string) error {
		start := time.Now()
		defer func() { GinkgoWriter.Printf("step %s took %s\n", step, elapsedSince(start)) }()
		switch step {
		case "written":
			expectAuthenticated(ctx, srv, nqn)
			Expect(dirty(Default)).To(BeNumerically(">", 0), "the guest's writes are dirty in the cache")
			Expect(bytes.HasPrefix(rbdExport(ctx, vol.Name), data)).To(BeFalse(),
				"Ceph already holds the guest's data: write-back with cleaning off must keep it in the cache")
			Eventually(func(g Gomega) {
				d := getVolume(g, ctx, vol.Name).Status.Stats.Dirty
				g.Expect(d).NotTo(BeNil())
				g.Expect(d.Value()).To(BeNumerically(">", 0))
			}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed(), "status.stats.dirty shows the dirty data")
		case "kill-restart":
			srv.Kill(ctx)
			srv.Restart(ctx, false)
			servedAgain("kill -9 and a restart with the persisted configuration")
		case "kill-forget-config":
			srv.Kill(ctx)
			srv.Restart(ctx, true)
			servedAgain("kill -9 and a restart without the persisted configuration")
			// The restarted dataplane had no keys until the operator gave
			// them again; the guest's queues authenticated anew.
			expectAuthenticated(ctx, srv, nqn)
		case "delete":
			deleteAndWait(ctx, vol)
			Eventually(func(g Gomega) {
				expectNotServing(g, ctx, srv, nqn)
				g.Expect(cachedBdevsOf(g, ctx, srv)).NotTo(HaveKey(cached))
			}).WithContext(ctx).WithTimeout(convergeTimeout).WithPolling(poll).Should(Succeed())
			got := rbdExport(ctx, vol.Name)
			Expect(bytes.HasPrefix(got, data)).To(BeTrue(),
				"Ceph's copy differs from what the guest wrote, first at byte %d", firstDiff(got, data))
		default:
			return fmt.Errorf("unknown step %q", step)
		}
		return nil
	}
	res := framework.RunGuestWithSteps(GinkgoTB(), framework.GuestOptions{
		Script: framework.GuestNVMeFunctions + framework.GuestStepFunctions + fmt.Sprintf(lifecycleJob, guestTargetPort, nqn, writtenMiB, n.tls),
		Files: map[string]string{
			filepath.Join(dir, "data"):     "/job/data",
			filepath.Join(dir, "host.key"): "/job/host.key",
			filepath.Join(dir, "ctrl.key"): "/job/ctrl.key",
			filepath.Join(dir, "psk.key"):  "/job/psk.key",
		},
		GuestForwardsTo:     map[int]string{guestTargetPort: fmt.Sprintf("%s:%d", srv.In.IP, nvmePort)},
		Timeout:             10 * time.Minute,
		ReturnInitiatorOops: true,
	}, handle)
	if res.InitiatorOops != "" {
		return res.InitiatorOops
	}
	Expect(res.ExitCode).To(Equal(0), "guest job's exit status")
	vals := framework.GuestValues(GinkgoTB(), res.Output)
	Expect(vals).To(HaveKeyWithValue("connect", "0"))
	if n.tls {
		Expect(vals).To(HaveKeyWithValue("insert-psk", "0"))
	}
	Expect(vals).To(HaveKeyWithValue("write", "0"))
	for _, k := range []string{"step-written", "step-kill-restart", "step-kill-forget-config", "step-delete", "disconnect"} {
		Expect(vals).To(HaveKeyWithValue(k, "0"))
	}
	Expect(vals).To(HaveKeyWithValue("sum-written", wantSum), "the guest reads back what it wrote")
	Expect(vals).To(HaveKeyWithValue("sum-after-restart", wantSum), "after kill -9 and a restart with the persisted configuration")
	Expect(vals).To(HaveKeyWithValue("sum-after-forget", wantSum), "after kill -9 and a restart without it (the operator re-created the volume with load)")
	return ""
}

// firstDiff is the first offset where got and want differ (or the shorter
// length).
func firstDiff(got, want []byte) int {
	n := min(len(got), len(want))
	for i := 0; i < n; i++ {
		if got[i] != want[i] {
			return i
		}
	}
	return n
}
