#!/usr/bin/env bash
# `make demo`: the main job on embedded defaults, on this machine.
#
# What it shows, each part real:
#   1. a one-node Ceph on 127.0.0.1 (cephx on); an RBD image written by the
#      restricted CSI user, who is refused outside its pool;
#   2. rackcache-dataplane serving that image over NVMe/TCP, configured with
#      SPDK's own rpc.py command line (spdk-rpc), only the guest's host NQN
#      allowed;
#   3. a qemu guest with Debian's stock kernel: its NVMe/TCP initiator
#      discovers and connects to the dataplane (through guestfwd, its only
#      way out), reads the data Ceph holds, writes new data, and the host
#      finds that data in Ceph.
# Ceph and the dataplane stay up afterwards; `make demo-down` stops them.
#
# Usage: hack/demo.sh up|down|status [--help]
#   RACKCACHE_DEMO_DIR        where the demo keeps its state (default: _output/demo)
#   RACKCACHE_DEMO_PORT       Ceph monitor port (default: 13300)
#   RACKCACHE_DEMO_NVMF_PORT  the dataplane's NVMe/TCP port (default: 14420)
#   RACKCACHE_DEMO_METRICS_PORT  its Prometheus port (default: 19100)
source "$(dirname "$0")/lib.sh"


demo_dir="${RACKCACHE_DEMO_DIR:-$REPO_ROOT/_output/demo}"
mon_port="${RACKCACHE_DEMO_PORT:-13300}"
nvmf_port="${RACKCACHE_DEMO_NVMF_PORT:-14420}"
metrics_port="${RACKCACHE_DEMO_METRICS_PORT:-19100}"
ceph_dir="$demo_dir/ceph"
dp_dir="$demo_dir/dataplane"
rpc_sock="$dp_dir/rpc.sock"
img=demo-volume
nqn=nqn.2026-11.io.rackcache:demo-volume
# The guest reaches the dataplane at this address through guestfwd.
guest_target=10.0.3.100
guest_port=4420

say() { printf '\n\033[1;32m==> %s\033[0m\n' "$*"; }

ceph_step() {
  say "1/3 Ceph: one monitor, one manager, one bluestore OSD on 127.0.0.1:$mon_port"
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

  local data="$demo_dir/pattern.bin" back="$demo_dir/readback.bin"
  # A second `make demo` finds the image from the first one: start afresh.
  "${rbd_user[@]}" rm --no-progress "$RACKCACHE_CEPH_POOL/$img" >/dev/null 2>&1 || true
  head -c $((8 << 20)) /dev/urandom >"$data"
  "${rbd_user[@]}" import --no-progress "$data" "$RACKCACHE_CEPH_POOL/$img" >/dev/null
  rm -f "$back"
  "${rbd_user[@]}" export --no-progress "$RACKCACHE_CEPH_POOL/$img" "$back" >/dev/null
  "${rbd_user[@]}" resize --no-progress --size 256M "$RACKCACHE_CEPH_POOL/$img" >/dev/null
  if cmp -s "$data" "$back"; then
    echo "    client.$RACKCACHE_CEPH_USER wrote rbd/$img (256 MiB) and read its first 8 MiB back identical"
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

dataplane_step() {
  say "2/3 rackcache-dataplane: rbd/$img over NVMe/TCP on 127.0.0.1:$nvmf_port, driven by SPDK's rpc.py"
  (cd "$REPO_ROOT/dataplane" && cargo build --quiet --release -p rackcache-dataplane)
  local bin="$REPO_ROOT/dataplane/target/release/rackcache-dataplane"
  dataplane_stop
  mkdir -p "$dp_dir"
  "$bin" --rpc-socket "$rpc_sock" --metrics-listen "127.0.0.1:$metrics_port" \
    >"$dp_dir/dataplane.log" 2>&1 </dev/null &
  echo $! >"$dp_dir/pid"
  local rpc=("$REPO_ROOT/bin/venv/bin/spdk-rpc" -s "$rpc_sock")
  local i=0
  until "${rpc[@]}" spdk_get_version >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -lt 100 ] || die "the dataplane did not answer on $rpc_sock (log: $dp_dir/dataplane.log)"
    kill -0 "$(cat "$dp_dir/pid")" 2>/dev/null || die "the dataplane exited (log: $dp_dir/dataplane.log)"
    sleep 0.1
  done
  local hostnqn
  hostnqn="$(sed -n 's/^hostnqn=//p' "$REPO_ROOT/bin/guest/info")"
  # The key stays in the keyring file: the RPC carries its path only.
  "${rpc[@]}" bdev_rbd_register_cluster ceph0 --user "$RACKCACHE_CEPH_USER" \
    --config-param "mon_host=$RACKCACHE_CEPH_MON_HOST" --key-file "$demo_dir/client.$RACKCACHE_CEPH_USER.keyring" >/dev/null
  "${rpc[@]}" bdev_rbd_create -b Ceph0 -c ceph0 "$RACKCACHE_CEPH_POOL" "$img" 4096 >/dev/null
  "${rpc[@]}" nvmf_create_transport -t TCP
  "${rpc[@]}" nvmf_create_subsystem "$nqn" -s RCDEMO0001 -d "rackcache demo volume"
  "${rpc[@]}" nvmf_subsystem_add_ns "$nqn" Ceph0 >/dev/null
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
  echo "    subsystem $nqn: namespace 1 = rbd $RACKCACHE_CEPH_POOL/$img, allowed host $hostnqn only"
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

guest_step() {
  say "3/3 qemu guest (Debian's stock kernel, TCG): its NVMe/TCP initiator against the dataplane"
  "$REPO_ROOT/hack/guest/build.sh" >/dev/null
  local started=$SECONDS job="$demo_dir/guest-job.sh" guest_data="$demo_dir/guest-pattern.bin"
  head -c $((4 << 20)) /dev/urandom >"$guest_data"
  cat >"$job" <<'JOB'
set -eu
A=$1 S=$2 NQN=$3
echo "DEMO: nvme discover -t tcp -a $A -s $S:"
nvme discover -t tcp -a "$A" -s "$S" | sed -n 's/^\(subnqn\|traddr\|trsvcid\):  */DEMO:   \1 /p'
nvme connect -t tcp -a "$A" -s "$S" -n "$NQN" >/dev/null
dev=""
for i in $(seq 50); do
  for s in /sys/class/nvme-subsystem/nvme-subsys*; do
    [ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
    for n in "$s"/nvme*n*; do
      case "${n##*/}" in *c*) ;; *) [ -b "/dev/${n##*/}" ] && dev=/dev/${n##*/} ;; esac
    done
  done
  [ -n "$dev" ] && break
  sleep 0.2
done
[ -n "$dev" ] || { echo "DEMO: no block device for $NQN"; exit 1; }
echo "DEMO: nvme connect: $dev, $(($(blockdev --getsize64 "$dev") >> 20)) MiB"
echo "DEMO: first 8 MiB (written into Ceph by rbd import): md5 $(dd if="$dev" bs=1M count=8 iflag=direct 2>/dev/null | md5sum | cut -c1-32)"
dd if=/job/guest-pattern.bin of="$dev" bs=1M seek=16 count=4 oflag=direct conv=fsync 2>/dev/null
echo "DEMO: wrote 4 MiB at 16 MiB with O_DIRECT; read back: md5 $(dd if="$dev" bs=1M skip=16 count=4 iflag=direct 2>/dev/null | md5sum | cut -c1-32)"
nvme disconnect -n "$NQN" >/dev/null
echo "DEMO: nvme disconnect: done"
JOB
  local wrapper="$demo_dir/guest-run.sh"
  printf 'sh /job/demo.sh %s %s %s\n' "$guest_target" "$guest_port" "$nqn" >"$wrapper"
  "$REPO_ROOT/hack/guest/run.sh" --script "$wrapper" \
    --file "$job:/job/demo.sh" --file "$guest_data:/job/guest-pattern.bin" \
    --guestfwd "$guest_port:$nvmf_port" \
    --timeout 300 --log "$demo_dir/guest-console.log" --quiet 2>/dev/null \
    || die "the guest job failed (console: $demo_dir/guest-console.log)"
  local out
  out="$(tr -d '\r' <"$demo_dir/guest-console.log" | sed -n 's/^DEMO: //p')"
  sed 's/^/    /' <<<"$out"

  # What the guest read must be what Ceph held; what it wrote must be in Ceph.
  local want_first want_written got_written
  want_first="$(md5sum <"$demo_dir/pattern.bin" | cut -c1-32)"
  want_written="$(md5sum <"$guest_data" | cut -c1-32)"
  grep -q "first 8 MiB.*md5 $want_first" <<<"$out" \
    || die "the guest read different data than Ceph holds (want md5 $want_first)"
  grep -q "read back: md5 $want_written" <<<"$out" \
    || die "the guest read back different data than it wrote (want md5 $want_written)"
  local exported="$demo_dir/exported.bin"
  rm -f "$exported"
  rbd --conf /dev/null --mon-host "$RACKCACHE_CEPH_MON_HOST" --id "$RACKCACHE_CEPH_USER" \
    --keyring "$demo_dir/client.$RACKCACHE_CEPH_USER.keyring" export --no-progress "$RACKCACHE_CEPH_POOL/$img" "$exported" >/dev/null
  got_written="$(dd if="$exported" bs=1M skip=16 count=4 2>/dev/null | md5sum | cut -c1-32)"
  rm -f "$exported"
  [ "$got_written" = "$want_written" ] \
    || die "Ceph does not hold what the guest wrote (md5 $got_written, want $want_written)"
  echo "    verified: the guest read Ceph's data (md5 $want_first), and Ceph now holds the guest's 4 MiB (md5 $want_written)"
  echo "    guest job took $((SECONDS - started)) s under TCG (console: $demo_dir/guest-console.log)"
  echo "    the dataplane counted:"
  curl -s "http://127.0.0.1:$metrics_port/metrics" | grep -E '^rackcache_nvmf_(connections_total|read_bytes_total|written_bytes_total)' | sed 's/^/      /' || true
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
