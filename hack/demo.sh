#!/usr/bin/env bash
# `make demo`: the product's main job on embedded defaults, on this machine.
#
# What it shows, each part real:
#   1. the cloud block storage: a one-node Ceph on 127.0.0.1 (cephx on); two
#      RBD images holding the same data, written by the restricted CSI user,
#      who is refused outside its pool;
#   2. the cache server: rackcache-dataplane with a file as its cache device,
#      a cached volume (write-back, adaptive) in front of the first image and
#      the second image raw, both namespaces of one NVMe/TCP subsystem that
#      only the guest's host NQN may use; its configuration persisted;
#   3. the compute node: a qemu guest with Debian's stock kernel whose
#      NVMe/TCP initiator reads a hot set from both namespaces; the demo
#      prints the read hit ratio, the four I/O volumes (core and cache, read
#      and written) and the speedup over raw RBD;
#   4. a warm restart: kill -9 of the dataplane right after a write-back
#      write, a restart from the persisted configuration (the cache is
#      attached, not reformatted), the guest's kernel reconnects, and the
#      hit ratio after it; what the guest wrote before the kill reads back.
# Ceph and the dataplane stay up afterwards; `make demo-down` stops them.
#
# Usage: hack/demo.sh up|down|status [--help]
#   RACKCACHE_DEMO_DIR        where the demo keeps its state (default: _output/demo)
#   RACKCACHE_DEMO_PORT       Ceph monitor port (default: 13300)
#   RACKCACHE_DEMO_NVMF_PORT  the dataplane's NVMe/TCP port (default: 14420)
#   RACKCACHE_DEMO_METRICS_PORT  its Prometheus port (default: 19100)
#   RACKCACHE_DEMO_STEP_PORT  where the guest waits for the host (default: 14480)
#   RACKCACHE_DEMO_PROFILE    cargo profile of the dataplane: release (default) or debug
source "$(dirname "$0")/lib.sh"


demo_dir="${RACKCACHE_DEMO_DIR:-$REPO_ROOT/_output/demo}"
mon_port="${RACKCACHE_DEMO_PORT:-13300}"
nvmf_port="${RACKCACHE_DEMO_NVMF_PORT:-14420}"
metrics_port="${RACKCACHE_DEMO_METRICS_PORT:-19100}"
step_port="${RACKCACHE_DEMO_STEP_PORT:-14480}"
profile="${RACKCACHE_DEMO_PROFILE:-release}"
ceph_dir="$demo_dir/ceph"
dp_dir="$demo_dir/dataplane"
rpc_sock="$dp_dir/rpc.sock"
img=demo-volume
raw_img=demo-raw
dp_bin="$REPO_ROOT/dataplane/target/$profile/rackcache-dataplane"
rpc=("$REPO_ROOT/bin/venv/bin/spdk-rpc" -s "$rpc_sock")
cache_file="$dp_dir/cache.img"
# Sizes: Ceph holds data_mib MiB of data in each image; the guest reads a
# hot_mib MiB hot set passes times per timing; the cached volume has
# cache_mib MiB of the cache_file_mib MiB cache device.
data_mib=32 hot_mib=8 passes=3 cache_mib=128 cache_file_mib=256
nqn=nqn.2026-11.io.rackcache:demo-volume
# The guest reaches the dataplane at this address through guestfwd.
guest_target=10.0.3.100
guest_port=4420

say() { printf '\n\033[1;32m==> %s\033[0m\n' "$*"; }

ceph_step() {
  say "1/4 Ceph: one monitor, one manager, one bluestore OSD on 127.0.0.1:$mon_port"
  local started=$SECONDS
  # hack/ceph.sh prints plain NAME=value lines (no spaces in the values).
  eval "$("$REPO_ROOT/hack/ceph.sh" up "$ceph_dir" --mon-port "$mon_port")"
  echo "    ready in $((SECONDS - started)) s; monitors $RACKCACHE_CEPH_MON_HOST"

  # The restricted user's key goes into a keyring file (0600), never onto a
  # command line where `ps` would show it.
  local keyring="$demo_dir/client.$RACKCACHE_CEPH_USER.keyring"
  umask 077
  printf '[client.%s]\n\tkey = %s\n' "$RACKCACHE_CEPH_USER" "$RACKCACHE_CEPH_KEY" >"$keyring"
  local rbd_user=(rbd --conf /dev/null --mon-host "$RACKCACHE_CEPH_MON_HOST"
    --id "$RACKCACHE_CEPH_USER" --keyring "$keyring")

  local data="$demo_dir/pattern.bin" back="$demo_dir/readback.bin" i
  head -c $((data_mib << 20)) /dev/urandom >"$data"
  # A second `make demo` finds the images from the first one: start afresh.
  for i in "$img" "$raw_img"; do
    "${rbd_user[@]}" rm --no-progress "$RACKCACHE_CEPH_POOL/$i" >/dev/null 2>&1 || true
    "${rbd_user[@]}" import --no-progress "$data" "$RACKCACHE_CEPH_POOL/$i" >/dev/null
    "${rbd_user[@]}" resize --no-progress --size 256M "$RACKCACHE_CEPH_POOL/$i" >/dev/null
  done
  rm -f "$back"
  "${rbd_user[@]}" export --no-progress "$RACKCACHE_CEPH_POOL/$img" "$back" >/dev/null
  if cmp -s "$data" <(head -c $((data_mib << 20)) "$back"); then
    echo "    client.$RACKCACHE_CEPH_USER wrote rbd/$img and rbd/$raw_img (256 MiB each, the same $data_mib MiB of data) and read it back identical"
  else
    die "RBD data read back differs from what was written"
  fi
  rm -f "$back"
  # A second pool that the restricted user has no caps for.
  ceph --conf "$CEPH_CONF" osd pool create demo-other 8 8 >/dev/null 2>&1
  rbd --conf "$CEPH_CONF" pool init demo-other
  if "${rbd_user[@]}" create --size 1M "demo-other/x" >/dev/null 2>&1; then
    die "the restricted user could create an image outside its pool"
  fi
  echo "    client.$RACKCACHE_CEPH_USER is refused outside pool '$RACKCACHE_CEPH_POOL' (cephx caps: profile rbd)"
}

# dp_call METHOD [JSON]: one JSON-RPC call through SPDK's Python client
# (spdk.rpc.client, the library under spdk-rpc, which has no commands for
# the bdev_adacache_* methods); prints the result as JSON.
dp_call() {
  "$REPO_ROOT/bin/venv/bin/python3" - "$rpc_sock" "$1" "${2:-}" <<'PY'
import json, sys
from spdk.rpc.client import JSONRPCClient, JSONRPCException
sock, method, params = sys.argv[1:4]
try:
    res = JSONRPCClient(sock, timeout=120).call(method, json.loads(params) if params else None)
except JSONRPCException as e:
    sys.exit(f"{method}: {e.message}")
print(json.dumps(res))
PY
}

# dataplane_start: runs rackcache-dataplane with its configuration kept in
# $dp_dir/config.json (restored when it exists) and waits until it answers.
dataplane_start() {
  "$dp_bin" --rpc-socket "$rpc_sock" --metrics-listen "127.0.0.1:$metrics_port" \
    --config-persist "$dp_dir/config.json" >>"$dp_dir/dataplane.log" 2>&1 </dev/null &
  echo $! >"$dp_dir/pid"
  # Not a job of this shell: the demo's own kill -9 is not reported.
  disown
  local i=0
  until "${rpc[@]}" spdk_get_version >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -lt 300 ] || die "the dataplane did not answer on $rpc_sock (log: $dp_dir/dataplane.log)"
    kill -0 "$(cat "$dp_dir/pid")" 2>/dev/null || die "the dataplane exited (log: $dp_dir/dataplane.log)"
    sleep 0.1
  done
}

dataplane_step() {
  say "2/4 rackcache-dataplane: a cached volume (rbd/$img behind a file cache) and raw rbd/$raw_img over NVMe/TCP"
  (cd "$REPO_ROOT/dataplane" && cargo build --quiet $([ "$profile" = release ] && echo --release) -p rackcache-dataplane)
  dataplane_stop
  mkdir -p "$dp_dir"
  # A fresh demo: no configuration or cache left from an earlier run.
  rm -f "$dp_dir/config.json" "$cache_file" "$dp_dir/dataplane.log"
  truncate -s "${cache_file_mib}M" "$cache_file"
  dataplane_start
  local hostnqn
  hostnqn="$(sed -n 's/^hostnqn=//p' "$REPO_ROOT/bin/guest/info")"
  # The key stays in the keyring file: the RPC carries its path only.
  "${rpc[@]}" bdev_rbd_register_cluster ceph0 --user "$RACKCACHE_CEPH_USER" \
    --config-param "mon_host=$RACKCACHE_CEPH_MON_HOST" --key-file "$demo_dir/client.$RACKCACHE_CEPH_USER.keyring" >/dev/null
  "${rpc[@]}" bdev_rbd_create -b Ceph0 -c ceph0 "$RACKCACHE_CEPH_POOL" "$img" 4096 >/dev/null
  "${rpc[@]}" bdev_rbd_create -b CephRaw -c ceph0 "$RACKCACHE_CEPH_POOL" "$raw_img" 4096 >/dev/null
  # The cache device: a file (the cache server's SSD), shared by cached volumes.
  "${rpc[@]}" bdev_aio_create "$cache_file" CacheFile 4096 >/dev/null
  dp_call bdev_adacache_create "{\"name\": \"Cached0\", \"core_bdev_name\": \"Ceph0\", \"cache_bdev_name\": \"CacheFile\",
    \"cache_size_mib\": $cache_mib, \"write_mode\": \"wb\", \"mode\": \"adaptive\",
    \"seq_cutoff\": {\"policy\": \"never\"}}" >/dev/null
  "${rpc[@]}" nvmf_create_transport -t TCP
  "${rpc[@]}" nvmf_create_subsystem "$nqn" -s RCDEMO0001 -d "rackcache demo volume"
  "${rpc[@]}" nvmf_subsystem_add_ns -n 1 "$nqn" Cached0 >/dev/null
  "${rpc[@]}" nvmf_subsystem_add_ns -n 2 "$nqn" CephRaw >/dev/null
  "${rpc[@]}" nvmf_subsystem_add_host "$nqn" "$hostnqn"
  # The listener, with the address the guest reaches it at for discovery
  # (rackcache_advertised: the dataplane's extension; rpc.py has no flag).
  "${rpc[@]}" load_subsystem_config <<JSON
{"subsystem": "nvmf", "config": [{"method": "nvmf_subsystem_add_listener", "params": {
  "nqn": "$nqn",
  "listen_address": {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "$nvmf_port"},
  "rackcache_advertised": {"traddr": "$guest_target", "trsvcid": "$guest_port"}}}]}
JSON
  echo "    pid $(cat "$dp_dir/pid"), JSON-RPC $rpc_sock, metrics http://127.0.0.1:$metrics_port/metrics"
  echo "    configuration kept in $dp_dir/config.json (--config-persist)"
  echo "    cache device: $cache_file ($cache_file_mib MiB file, aio bdev CacheFile)"
  echo "    $nqn: namespace 1 = Cached0 (write-back, adaptive, $cache_mib MiB of cache in front of rbd/$img),"
  echo "      namespace 2 = CephRaw (rbd/$raw_img, the same data, no cache); allowed host $hostnqn only"
}

dataplane_stop() {
  local pid
  pid="$(cat "$dp_dir/pid" 2>/dev/null)" || return 0
  if [ -n "$pid" ] && grep -qa rackcache-dataplane "/proc/$pid/cmdline" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    local i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$dp_dir/pid"
}

# The guest's job. The hot set is read in 64 KiB O_DIRECT reads (dd: the
# guest has no fio), PASSES times per timing, from the raw namespace and from
# the cached one. At each `sync NAME` the job prints "DEMO-SYNC NAME" and
# waits for the host's one-shot "go-NAME" (an HTTP GET through guestfwd):
# the host takes its measurements there, and at "restart" kills the
# dataplane with SIGKILL right after the job's write-back write and starts
# it again from its persisted configuration.
guest_job() {
  cat <<'JOB'
set -eu
A=$1 S=$2 NQN=$3 HOT_MIB=$4 PASSES=$5 DATA_MIB=$6
# Kernel messages stay in dmesg (the host reads our lines from the console).
echo 1 >/proc/sys/kernel/printk
nvme connect -t tcp -a "$A" -s "$S" -n "$NQN" --reconnect-delay=1 --ctrl-loss-tmo=300 >/dev/null
# ns NSID: the block device of namespace NSID.
ns() {
  for s in /sys/class/nvme-subsystem/nvme-subsys*; do
    [ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
    for n in "$s"/nvme*n*; do
      name="${n##*/}"
      case "$name" in *c*) continue ;; esac
      [ "$(cat "/sys/block/$name/nsid" 2>/dev/null)" = "$1" ] && [ -b "/dev/$name" ] && echo "/dev/$name"
    done
  done
  return 0
}
i=0 cdev="" rdev=""
while { [ -z "$cdev" ] || [ -z "$rdev" ]; } && [ $i -lt 50 ]; do cdev="$(ns 1)"; rdev="$(ns 2)"; sleep 0.2; i=$((i + 1)); done
[ -n "$cdev" ] && [ -n "$rdev" ] || { echo "DEMO: the namespaces did not appear"; exit 1; }
echo "DEMO: connected: cached volume $cdev, raw rbd $rdev"
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
JOB
}

# wait_mark WORD: waits until the guest printed "DEMO-SYNC WORD".
wait_mark() {
  until [ -f "$console" ] && tr -d '\r' <"$console" | grep -qx "DEMO-SYNC $1"; do
    kill -0 "$guest_pid" 2>/dev/null || die "the guest stopped before $1 (console: $console)"
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
    "$(dp_call bdev_adacache_get_stats '{"name": "Cached0"}')"
}

guest_step() {
  say "3/4 the compute node: a qemu guest (Debian's stock kernel, TCG) reads a ${hot_mib} MiB hot set over NVMe/TCP"
  "$REPO_ROOT/hack/guest/build.sh" >/dev/null
  local started=$SECONDS job="$demo_dir/guest-job.sh" guest_data="$demo_dir/guest-pattern.bin"
  head -c $((4 << 20)) /dev/urandom >"$guest_data"
  guest_job >"$job"
  local wrapper="$demo_dir/guest-run.sh"
  printf 'sh /job/demo.sh %s %s %s %s %s %s\n' "$guest_target" "$guest_port" "$nqn" "$hot_mib" "$passes" "$data_mib" >"$wrapper"
  console="$demo_dir/guest-console.log"
  rm -f "$console"
  "$REPO_ROOT/hack/guest/run.sh" --script "$wrapper" \
    --file "$job:/job/demo.sh" --file "$guest_data:/job/guest-pattern.bin" \
    --guestfwd "$guest_port:$nvmf_port" --guestfwd "8080:$step_port" \
    --timeout 600 --log "$console" --quiet 2>/dev/null &
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
  say "4/4 warm restart: kill -9 the dataplane, start it again from its persisted configuration"
  local pid
  pid="$(cat "$dp_dir/pid")"
  kill -KILL "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  local t0=$SECONDS
  dataplane_start
  echo "    killed pid $pid with SIGKILL (4 MiB written in write-back just before); new pid $(cat "$dp_dir/pid") serving again after $((SECONDS - t0)) s"
  open_barrier restart
  wait_mark after
  snap_after="$(snapshot)"
  open_barrier after
  wait "$guest_pid" || die "the guest job failed (console: $console)"
  trap - EXIT
  stop_pid "${barrier_pid:-}" socat

  # What the guest read must be what Ceph holds, on both namespaces, also
  # after the restart; what it wrote in write-back must survive the kill.
  local want_data want_written k
  want_data="$(head -c $((data_mib << 20)) "$demo_dir/pattern.bin" | md5sum | cut -c1-32)"
  want_written="$(md5sum <"$guest_data" | cut -c1-32)"
  for k in raw-data cached-data cached-data-after; do
    [ "$(val "$k")" = "$want_data" ] || die "$k: the guest read md5 $(val "$k"), Ceph holds $want_data"
  done
  [ "$(val written-after)" = "$want_written" ] \
    || die "the 4 MiB written before the kill read back with md5 $(val written-after), want $want_written"
  echo "    verified: both namespaces read Ceph's data (md5 $want_data), also after the restart;"
  echo "    the 4 MiB written in write-back before kill -9 read back identical (md5 $want_written)"

  "$REPO_ROOT/bin/venv/bin/python3" - "$snap_raw" "$snap_warm" "$snap_before" "$snap_after" \
    "$(val raw-cs)" "$(val cached-cs)" "$(val after-cs)" "$hot_mib" "$passes" <<'PY'
import json, sys
raw, warm, before, after = (json.loads(a) for a in sys.argv[1:5])
raw_cs, cached_cs, after_cs = (int(a) for a in sys.argv[5:8])
hot, passes = int(sys.argv[8]), int(sys.argv[9])

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

raw_us = mean_us(raw, warm, "CephRaw")
warm_us = mean_us(warm, before, "Cached0")
after_us = mean_us(None, after, "Cached0")
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

up() {
  mkdir -p "$demo_dir"
  # A dataplane left by an earlier run holds the image open (Ceph refuses to
  # remove an image with watchers): stop it before Ceph's step starts afresh.
  dataplane_stop
  ceph_step
  dataplane_step
  guest_step
  say "Done. Still running: Ceph in $ceph_dir, rackcache-dataplane (pid $(cat "$dp_dir/pid"))"
  cat <<MSG
    Ceph:       export CEPH_CONF=$ceph_dir/ceph.conf; ceph -s; rbd ls
    Dataplane:  bin/venv/bin/spdk-rpc -s $rpc_sock nvmf_get_subsystems
                bin/venv/bin/spdk-rpc -s $rpc_sock bdev_get_iostat
                curl -s http://127.0.0.1:$metrics_port/metrics
    Stop both:  make demo-down     (stops them by PID and removes $demo_dir)
MSG
}

down() {
  dataplane_stop
  if [ -d "$ceph_dir" ]; then "$REPO_ROOT/hack/ceph.sh" down "$ceph_dir"; fi
  rm -rf "$demo_dir"
  log "demo stopped"
}

if [ "${RACKCACHE_DEMO_ONLY:-}" = ceph ]; then mkdir -p "$demo_dir"; ceph_step; exit 0; fi
case "${1:-}" in
  --help|-h) usage ;;
  up) up ;;
  down) down ;;
  status) if [ -f "$ceph_dir/env" ]; then CEPH_CONF="$ceph_dir/ceph.conf" ceph -s; else echo "demo not running"; fi ;;
  *) usage; exit 2 ;;
esac
