#!/usr/bin/env bash
# A real one-node Ceph cluster for tests and the demo: one monitor, one manager
# and one bluestore OSD on a sparse file, bound to 127.0.0.1 only, cephx on.
# Everything (config, keyrings, data, logs, pid files) lives under DIR.
#
# Usage:
#   hack/ceph.sh up DIR [--mon-port PORT] [--pool NAME] [--user NAME] [--memstore]
#                       [--cpus LIST]
#       Start the cluster (or re-print its settings if it already runs) and
#       print shell assignments: the monitor address, the client user (caps:
#       `profile rbd` on POOL only) and its key, CEPH_CONF. --cpus runs the
#       daemons on those CPUs only (taskset's list, e.g. 1 or 2-3), so that a
#       benchmark can keep its clients off them, as Ceph runs on other
#       machines than its clients in a real deployment.
#   hack/ceph.sh env DIR      Re-print those settings.
#   hack/ceph.sh down DIR     Stop the daemons by PID (TERM, then KILL after
#                             10 s) and remove DIR.
#   hack/ceph.sh --help
#
# Ports: the monitor listens on PORT (msgr2) and PORT+1 (msgr1); the OSD and
# manager bind within PORT+2..PORT+40. Default PORT: 13300.
source "$(dirname "$0")/lib.sh"


cmd="${1:-}"; dir="${2:-}"
case "$cmd" in
  --help|-h|help) usage; exit 0 ;;
  up|down|env) [ -n "$dir" ] || die "$cmd needs a DIR (see --help)"; shift 2 ;;
  "") usage; exit 2 ;;
  *) die "unknown command: $cmd (see --help)" ;;
esac

mon_port=13300 pool=rbd user=csi objectstore=bluestore cpus=
while [ $# -gt 0 ]; do
  case "$1" in
    --mon-port) mon_port="${2:?--mon-port needs a value}"; shift 2 ;;
    --pool) pool="${2:?--pool needs a value}"; shift 2 ;;
    --user) user="${2:?--user needs a value}"; shift 2 ;;
    --memstore) objectstore=memstore; shift ;;
    --cpus) cpus="${2:?--cpus needs a value}"; shift 2 ;;
    *) die "unknown option: $1 (see --help)" ;;
  esac
done
[[ "$mon_port" =~ ^[0-9]+$ ]] && [ "$mon_port" -ge 1024 ] && [ "$mon_port" -le 65000 ] \
  || die "--mon-port must be a number from 1024 to 65000, got '$mon_port'"
[[ "$pool" =~ ^[A-Za-z0-9_.-]+$ ]] || die "--pool: invalid pool name '$pool'"
[[ "$user" =~ ^[A-Za-z0-9_.-]+$ ]] || die "--user: invalid user name '$user'"
[[ "$cpus" =~ ^[0-9,-]*$ ]] || die "--cpus: expected a CPU list such as 1 or 2-3, got '$cpus'"

mkdir -p "$dir" 2>/dev/null || true
dir="$(cd "$dir" 2>/dev/null && pwd)" || die "cannot use directory $2"
conf="$dir/ceph.conf"
export CEPH_CONF="$conf"

# ceph runs the admin CLI against our cluster only, never /etc/ceph, and
# never waits long for an answer.
ceph_admin() { timeout 60 ceph --conf "$conf" --connect-timeout 20 "$@"; }

# Starts a daemon, on --cpus when given (it forks: the mask is inherited).
run_daemon() {
  if [ -n "$cpus" ]; then
    taskset -c "$cpus" "$@"
  else
    "$@"
  fi
}

write_conf() {
  local fsid="$1"
  cat >"$conf" <<CONF
# Written by hack/ceph.sh: a throwaway one-node test cluster.
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$mon_port,v1:127.0.0.1:$((mon_port + 1))]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
ms bind port min = $((mon_port + 2))
ms bind port max = $((mon_port + 40))
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = $dir/keyring
run dir = $dir/run
admin socket = $dir/run/\$name.asok
pid file = $dir/run/\$name.pid
log file = $dir/log/\$name.log
mon cluster log file = $dir/log/cluster.log
log to stderr = false
err to stderr = true
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
paxos propose interval = 0.1
auth allow insecure global id reclaim = false
mon data = $dir/mon.\$id
osd data = $dir/osd.\$id
mgr data = $dir/mgr.\$id

[mgr]
keyring = $dir/mgr.\$id/keyring
mgr initial modules = iostat

[osd]
keyring = $dir/osd.\$id/keyring
osd objectstore = $objectstore
bluestore block create = true
bluestore block size = 10G
bluestore cache autotune = false
bluestore cache size = 64M
bluestore fsck on mount = false
osd op num shards = 2
osd memory target = 939524096
memstore device bytes = 2G
CONF
}

print_env() {
  [ -f "$dir/env" ] || die "no cluster in $dir (run: hack/ceph.sh up $dir)"
  cat "$dir/env"
}

# alive PIDFILE: the pid file names a running ceph daemon (checked by name, so
# a recycled PID of someone else's process is never signalled).
alive() {
  local pid
  pid="$(cat "$1" 2>/dev/null)" || return 1
  [ -n "$pid" ] && grep -q '^ceph-' "/proc/$pid/comm" 2>/dev/null
}

# stop_daemons sends TERM to every daemon at once, waits up to 10 s for all of
# them, then KILLs whatever is left.
stop_daemons() {
  local pf waited=0 left
  for pf in "$dir"/run/*.pid; do
    [ -e "$pf" ] || continue
    if alive "$pf"; then kill -TERM "$(cat "$pf")" 2>/dev/null || true; else rm -f "$pf"; fi
  done
  while :; do
    left=()
    for pf in "$dir"/run/*.pid; do
      [ -e "$pf" ] && alive "$pf" && left+=("$pf")
    done
    [ ${#left[@]} -gt 0 ] || break
    if [ $waited -ge 100 ]; then
      for pf in "${left[@]}"; do
        log "$(basename "$pf" .pid) ($(cat "$pf")) ignored TERM for 10 s: KILL"
        kill -KILL "$(cat "$pf")" 2>/dev/null || true
      done
      sleep 0.2
      break
    fi
    sleep 0.1; waited=$((waited + 1))
  done
  rm -f "$dir"/run/*.pid
}

down() {
  # Refuse to delete a directory this script did not make.
  if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ] && [ ! -f "$dir/.rackcache-ceph" ]; then
    die "$dir was not made by hack/ceph.sh (no .rackcache-ceph marker): not touching it"
  fi
  stop_daemons
  rm -rf "$dir"
  log "stopped; removed $dir"
}

wait_for() {
  local what="$1" seconds="$2"; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { log "timed out after ${seconds}s waiting for $what"; return 1; }
    sleep 0.3
  done
}

osd_up() { ceph_admin osd stat -f json | grep -q '"num_up_osds":1'; }
# "9 pgs: 9 active+clean; ..." once every placement group is usable.
pgs_active() { ceph_admin pg stat | grep -qE '^([0-9]+) pgs: \1 active\+clean;'; }

up() {
  if [ -f "$dir/env" ] && alive "$dir/run/mon.a.pid" && alive "$dir/run/osd.0.pid"; then
    log "already running in $dir"
    print_env
    return 0
  fi
  [ -z "$(ls -A "$dir")" ] || [ -f "$dir/.rackcache-ceph" ] \
    || die "$dir is not empty and was not made by hack/ceph.sh"
  stop_daemons
  find "$dir" -mindepth 1 -delete
  touch "$dir/.rackcache-ceph"
  mkdir -p "$dir/run" "$dir/log" "$dir/mon.a" "$dir/mgr.x" "$dir/osd.0"
  for bin in ceph-mon ceph-mgr ceph-osd ceph-authtool monmaptool ceph rbd; do
    command -v "$bin" >/dev/null || die "$bin not found: run hack/deps.sh apt"
  done

  local fsid
  fsid="$(cat /proc/sys/kernel/random/uuid)"
  write_conf "$fsid"
  log "starting ceph ($objectstore) in $dir, monitor on 127.0.0.1:$mon_port"

  # Monitor: keyrings for mon. and client.admin, a one-monitor map, mkfs, start.
  ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool "$dir/keyring" --gen-key -n client.admin \
    --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
  monmaptool --create --fsid "$fsid" \
    --addv a "[v2:127.0.0.1:$mon_port,v1:127.0.0.1:$((mon_port + 1))]" "$dir/monmap" >/dev/null
  ceph-mon --conf "$conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/keyring"
  run_daemon ceph-mon --conf "$conf" -i a
  wait_for "the monitor" 30 ceph_admin mon stat

  # Manager.
  ceph_admin auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' \
    -o "$dir/mgr.x/keyring"
  run_daemon ceph-mgr --conf "$conf" -i x

  # One OSD whose bluestore lives on a sparse file in its data directory.
  local osd_uuid osd_secret osd_id
  osd_uuid="$(cat /proc/sys/kernel/random/uuid)"
  osd_secret="$(ceph-authtool --gen-print-key)"
  printf '{"cephx_secret": "%s"}\n' "$osd_secret" >"$dir/osd.0/new.json"
  osd_id="$(ceph_admin osd new "$osd_uuid" -i "$dir/osd.0/new.json")"
  rm -f "$dir/osd.0/new.json"
  [ "$osd_id" = 0 ] || die "expected OSD id 0, got '$osd_id'"
  ceph-authtool --create-keyring "$dir/osd.0/keyring" --name osd.0 --add-key "$osd_secret" >/dev/null
  ceph-osd --conf "$conf" -i 0 --mkfs --osd-uuid "$osd_uuid" 2>"$dir/log/osd.0.mkfs.log" \
    || { cat "$dir/log/osd.0.mkfs.log" >&2; die "ceph-osd --mkfs failed"; }
  run_daemon ceph-osd --conf "$conf" -i 0
  wait_for "the OSD to come up" 60 osd_up

  # An RBD pool and a client that may use that pool only.
  ceph_admin osd pool create "$pool" 8 8 >/dev/null 2>&1
  timeout 60 rbd --conf "$conf" pool init "$pool"
  local key
  ceph_admin auth get-or-create "client.$user" \
    mon 'profile rbd' osd "profile rbd pool=$pool" mgr "profile rbd pool=$pool" >/dev/null
  key="$(ceph_admin auth get-key "client.$user")"
  wait_for "the pool's placement groups" 60 pgs_active

  cat >"$dir/env" <<ENV
CEPH_CONF=$conf
RACKCACHE_CEPH_DIR=$dir
RACKCACHE_CEPH_MON_HOST=[v2:127.0.0.1:$mon_port,v1:127.0.0.1:$((mon_port + 1))]
RACKCACHE_CEPH_MON_V1=127.0.0.1:$((mon_port + 1))
RACKCACHE_CEPH_MON_V2=127.0.0.1:$mon_port
RACKCACHE_CEPH_POOL=$pool
RACKCACHE_CEPH_USER=$user
RACKCACHE_CEPH_KEY=$key
RACKCACHE_CEPH_ADMIN_KEYRING=$dir/keyring
ENV
  log "ready"
  print_env
}

case "$cmd" in
  up)
    if ! up; then
      log "start-up failed; last log lines:"
      tail -n 20 "$dir"/log/*.log >&2 2>/dev/null || true
      stop_daemons
      exit 1
    fi ;;
  env) print_env ;;
  down) down ;;
esac
