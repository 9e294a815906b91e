# The demo's compute node, sourced by hack/demo.sh: a qemu guest with
# Debian's stock kernel connects to both CachedVolumes at the address, port
# and NQN their status gives, reads a hot set, writes in write-back, rides
# out a kill -9 of the dataplane pod's process, and checks every byte.

# The guest's job. The hot set is read in 64 KiB O_DIRECT reads (dd: the
# guest has no fio), PASSES times per timing, from the pass-through volume
# (raw RBD) and from the cached one. At each `sync NAME` the job prints "DEMO-SYNC NAME" and
# waits for the host's one-shot "go-NAME" (an HTTP GET through guestfwd):
# the host takes its measurements there, and at "restart" kills the
# dataplane pod's process with SIGKILL right after the job's write-back
# write; the stand-in kubelet starts it again, and it restores its
# persisted configuration.
guest_job() {
  cat <<'JOB'
set -eu
A=$1 S=$2 NQN=$3 RAW_NQN=$4 HOT_MIB=$5 PASSES=$6 DATA_MIB=$7
# Kernel messages stay in dmesg (the host reads our lines from the console).
echo 1 >/proc/sys/kernel/printk
# Each volume with its DH-HMAC-CHAP keys (host, and controller: the guest
# checks the server too).
for k in cached:"$NQN" raw:"$RAW_NQN"; do
  nvme connect -t tcp -a "$A" -s "$S" -n "${k#*:}" --reconnect-delay=1 --ctrl-loss-tmo=300 \
    --dhchap-secret="$(cat "/job/${k%%:*}.host")" --dhchap-ctrl-secret="$(cat "/job/${k%%:*}.ctrl")" >/dev/null
done
# ns SUBNQN NSID: the block device of namespace NSID of subsystem SUBNQN.
ns() {
  for s in /sys/class/nvme-subsystem/nvme-subsys*; do
    [ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$1" ] || continue
    for n in "$s"/nvme*n*; do
      name="${n##*/}"
      case "$name" in *c*) continue ;; esac
      [ "$(cat "/sys/block/$name/nsid" 2>/dev/null)" = "$2" ] && [ -b "/dev/$name" ] && echo "/dev/$name"
    done
  done
  return 0
}
i=0 cdev="" rdev=""
while { [ -z "$cdev" ] || [ -z "$rdev" ]; } && [ $i -lt 50 ]; do cdev="$(ns "$NQN" 1)"; rdev="$(ns "$RAW_NQN" 1)"; sleep 0.2; i=$((i + 1)); done
[ -n "$cdev" ] && [ -n "$rdev" ] || { echo "DEMO: the namespaces did not appear"; exit 1; }
echo "DEMO: connected and authenticated (DH-HMAC-CHAP, both ways): cached volume $cdev, pass-through (raw rbd) $rdev"
centis() { cut -d' ' -f1 /proc/uptime | tr -d .; }
pass() { dd if="$1" bs=64k count=$((HOT_MIB * 16)) iflag=direct of=/dev/null 2>/dev/null; }
timed() {
  t0=$(centis) n=0
  while [ $n -lt $PASSES ]; do pass "$1"; n=$((n + 1)); done
  echo $(($(centis) - t0))
}
sync_host() {
  echo "DEMO-SYNC $1"
  n=0
  until wget -q -O - "http://10.0.3.100:8080/" 2>/dev/null | grep -qx "go-$1"; do
    n=$((n + 1)); [ $n -lt 600 ] || { echo "DEMO: the host never said go-$1"; exit 1; }
    sleep 0.5
  done
}
sum() { dd if="$1" bs=1M skip=$2 count=$3 iflag=direct 2>/dev/null | md5sum | cut -c1-32; }
echo "DEMO-VAL raw-data=$(sum "$rdev" 0 "$DATA_MIB")"
echo "DEMO-VAL cached-data=$(sum "$cdev" 0 "$DATA_MIB")"
pass "$rdev"
sync_host raw
echo "DEMO-VAL raw-cs=$(timed "$rdev")"
sync_host warm
echo "DEMO-VAL cached-cs=$(timed "$cdev")"
dd if=/job/guest-pattern.bin of="$cdev" bs=1M seek=64 count=4 oflag=direct conv=notrunc 2>/dev/null
sync_host restart
echo "DEMO-VAL after-cs=$(timed "$cdev")"
sync_host after
echo "DEMO-VAL written-after=$(sum "$cdev" 64 4)"
echo "DEMO-VAL cached-data-after=$(sum "$cdev" 0 "$DATA_MIB")"
nvme disconnect -n "$NQN" >/dev/null
nvme disconnect -n "$RAW_NQN" >/dev/null
JOB
}

# wait_mark WORD: waits until the guest printed "DEMO-SYNC WORD".
wait_mark() {
  until [ -f "$console" ] && tr -d '\r' <"$console" | grep -qx "DEMO-SYNC $1"; do
    kill -0 "$guest_pid" 2>/dev/null \
      || die "the guest stopped before $1: $(tail -n 1 "$guest_run_log" 2>/dev/null) (console: $console)"
    sleep 0.2
  done
}

# open_barrier WORD: answers the guest's next GET with go-WORD, once.
open_barrier() {
  stop_pid "${barrier_pid:-}" socat
  # socat parses quotes and escapes in its address: the answer comes from a
  # script instead.
  printf '#!/bin/sh\nprintf "HTTP/1.0 200 OK\\r\\nContent-Type: text/plain\\r\\n\\r\\ngo-%%s\\n" "$1"\n' >"$demo_dir/go.sh"
  chmod +x "$demo_dir/go.sh"
  socat -T 10 "TCP-LISTEN:$step_port,bind=127.0.0.1,reuseaddr" SYSTEM:"$demo_dir/go.sh $1" &
  barrier_pid=$!
}

# stop_pid PID WORD: ends a process this script started, if it still runs
# (its command line still holds WORD: the PID was not reused).
stop_pid() {
  [ -n "${1:-}" ] || return 0
  grep -qa "$2" "/proc/$1/cmdline" 2>/dev/null || return 0
  kill "$1" 2>/dev/null || true
}

val() { tr -d '\r' <"$console" | sed -n "s/^DEMO-VAL $1=//p" | tail -n 1; }

# snapshot: bdev_get_iostat of every bdev and the cached volume's statistics.
snapshot() {
  printf '{"iostat": %s, "cache": %s}' "$(dp_call bdev_get_iostat)" \
    "$(dp_call bdev_adacache_get_stats "{\"name\": \"$cached_bdev\"}")"
}

guest_step() {
  say "5/7 the compute node: a qemu guest (Debian's stock kernel, TCG) connects to both volumes, reads an ${hot_mib} MiB hot set"
  "$REPO_ROOT/hack/guest/build.sh" >/dev/null
  local started=$SECONDS job="$demo_dir/guest-job.sh" guest_data="$demo_dir/guest-pattern.bin"
  head -c $((4 << 20)) /dev/urandom >"$guest_data"
  guest_job >"$job"
  local wrapper="$demo_dir/guest-run.sh"
  printf 'sh /job/demo.sh %s %s %s %s %s %s %s\n' "$guest_target" "$guest_port" "$nqn" "$raw_nqn" "$hot_mib" "$passes" "$data_mib" >"$wrapper"
  console="$demo_dir/guest-console.log" guest_run_log="$demo_dir/guest-run.log"
  rm -f "$console" "$console".hung-*
  "$REPO_ROOT/hack/guest/run.sh" --script "$wrapper" \
    --file "$job:/job/demo.sh" --file "$guest_data:/job/guest-pattern.bin" \
    --file "$demo_dir/keys/$img.host:/job/cached.host" --file "$demo_dir/keys/$img.ctrl:/job/cached.ctrl" \
    --file "$demo_dir/keys/$raw_img.host:/job/raw.host" --file "$demo_dir/keys/$raw_img.ctrl:/job/raw.ctrl" \
    --guestfwd "$guest_port:$nvmf_port" --guestfwd "8080:$step_port" \
    --timeout 600 --log "$console" --quiet 2> >(tee "$guest_run_log" | grep --line-buffered -a 'warning' | sed -u 's/^/    /' >&2) &
  guest_pid=$!
  # Should the demo stop early, the guest (run.sh stops qemu on TERM) and a
  # barrier still listening go with it.
  trap 'stop_pid "${barrier_pid:-}" socat; stop_pid "$guest_pid" run.sh' EXIT

  local snap_raw snap_warm snap_before snap_after
  wait_mark raw
  snap_raw="$(snapshot)"
  open_barrier raw
  wait_mark warm
  snap_warm="$(snapshot)"
  open_barrier warm
  wait_mark restart
  snap_before="$(snapshot)"
  say "6/7 warm restart: kill -9 the dataplane pod's process; the kubelet restarts it, it restores its persisted configuration"
  local pid
  pid="$(dataplane_pid)"
  kill -KILL "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  local t0=$SECONDS
  wait_until 120 "the dataplane to be restarted" dataplane_restarted "$pid" || fail "$kube_dir/kubelet.log"
  echo "    killed pid $pid with SIGKILL (4 MiB written in write-back just before); new pid $(dataplane_pid) serving again after $((SECONDS - t0)) s"
  wait_until 120 "pod $dp_pod Ready again" kubectl -n "$ns" wait --for=condition=Ready --timeout=1s "pod/$dp_pod" \
    || fail "$kube_dir/kubelet.log"
  echo "    pod $dp_pod Ready again (restarts: $(kubectl -n "$ns" get pod "$dp_pod" -o jsonpath='{.status.containerStatuses[0].restartCount}'))"
  open_barrier restart
  wait_mark after
  snap_after="$(snapshot)"
  open_barrier after
  wait "$guest_pid" || die "the guest job failed: $(tail -n 1 "$guest_run_log") (console: $console)"
  trap - EXIT
  stop_pid "${barrier_pid:-}" socat

  # What the guest read must be what Ceph holds, on both volumes, also
  # after the restart; what it wrote in write-back must survive the kill.
  local want_data want_written k
  want_data="$(head -c $((data_mib << 20)) "$demo_dir/pattern.bin" | md5sum | cut -c1-32)"
  want_written="$(md5sum <"$guest_data" | cut -c1-32)"
  for k in raw-data cached-data cached-data-after; do
    [ "$(val "$k")" = "$want_data" ] || die "$k: the guest read md5 $(val "$k"), Ceph holds $want_data"
  done
  [ "$(val written-after)" = "$want_written" ] \
    || die "the 4 MiB written before the kill read back with md5 $(val written-after), want $want_written"
  echo "    verified: both volumes read Ceph's data (md5 $want_data), also after the restart;"
  echo "    the 4 MiB written in write-back before kill -9 read back identical (md5 $want_written)"

  "$REPO_ROOT/bin/venv/bin/python3" - "$snap_raw" "$snap_warm" "$snap_before" "$snap_after" \
    "$(val raw-cs)" "$(val cached-cs)" "$(val after-cs)" "$hot_mib" "$passes" "$cached_bdev" "$raw_bdev" <<'PY'
import json, sys
raw, warm, before, after = (json.loads(a) for a in sys.argv[1:5])
raw_cs, cached_cs, after_cs = (int(a) for a in sys.argv[5:8])
hot, passes = int(sys.argv[8]), int(sys.argv[9])
cached_bdev, raw_bdev = sys.argv[10:12]

def io(snap, name):
    for b in snap["iostat"]["bdevs"]:
        if b["name"] == name:
            return b
    return {"num_read_ops": 0, "read_latency_ticks": 0}

def mean_us(a, b, name):
    """Mean read latency at the dataplane between two snapshots (a: None = since start)."""
    x, y = (io(a, name) if a else {"num_read_ops": 0, "read_latency_ticks": 0}), io(b, name)
    ops = y["num_read_ops"] - x["num_read_ops"]
    rate = b["iostat"]["tick_rate"]
    return (y["read_latency_ticks"] - x["read_latency_ticks"]) / rate * 1e6 / ops if ops else 0.0

def hit(a, b):
    x, y = (a["cache"]["requests"] if a else {"rd_total": 0, "rd_hits": 0}), b["cache"]["requests"]
    reads = y["rd_total"] - x["rd_total"]
    return (y["rd_hits"] - x["rd_hits"]) / reads if reads else 0.0

raw_us = mean_us(raw, warm, raw_bdev)
warm_us = mean_us(warm, before, cached_bdev)
after_us = mean_us(None, after, cached_bdev)
warm_hit, after_hit = hit(warm, before), hit(None, after)
mib = lambda v: f"{v / (1 << 20):7.1f} MiB"
b = before["cache"]["blocks"]
print("    the cached volume's I/O volumes since its creation (bdev_adacache_get_stats blocks):")
print(f"      core (Ceph) read {mib(b['core_volume_rd'])}   core (Ceph) written {mib(b['core_volume_wr'])}")
print(f"      cache read       {mib(b['cache_volume_rd'])}   cache written       {mib(b['cache_volume_wr'])}")
print(f"      (host read       {mib(b['volume_rd'])}   host written        {mib(b['volume_wr'])};"
      f" dirty {before['cache']['dirty_bytes'] >> 20} MiB before the kill)")
print(f"    {passes} passes over the {hot} MiB hot set in 64 KiB reads:")
print("                            read hit   mean read latency     guest's time (TCG)")
print("                            ratio      at the dataplane")
print(f"      raw RBD               -          {raw_us:8.0f} us           {raw_cs / 100:6.2f} s")
print(f"      cached, warm          {warm_hit:5.3f}      {warm_us:8.0f} us           {cached_cs / 100:6.2f} s")
print(f"      cached, after restart {after_hit:5.3f}      {after_us:8.0f} us           {after_cs / 100:6.2f} s")
sp = lambda a, b: f"{a / b:.1f}x" if b else "-"
print(f"    speedup over raw RBD: {sp(raw_us, warm_us)} at the dataplane, {sp(raw_cs, cached_cs)} as the guest saw it"
      " (the emulated guest's own cost per read weighs on the latter)")
print(f"    after kill -9 and restart: hit ratio {after_hit:.3f}"
      f" ({after_hit / warm_hit * 100 if warm_hit else 0:.0f}% of before), speedup {sp(raw_us, after_us)} at the dataplane")
PY
  echo "    guest job took $((SECONDS - started)) s (console: $console)"
}


# dataplane_restarted OLD_PID: the pod's process is a new one and answers.
dataplane_restarted() {
  local pid
  pid="$(dataplane_pid)"
  [ -n "$pid" ] && [ "$pid" != "$1" ] && "${rpc[@]}" spdk_get_version
}
