#!/usr/bin/env bash
# `make demo`: the main job on embedded defaults, on this machine.
#
# At this stage of the project it stands up the local infrastructure that
# every later part runs on, and shows each piece working for real:
#   1. a one-node Ceph on 127.0.0.1 (cephx on), an RBD image written and read
#      back by the restricted CSI user;
#   2. the qemu guest with Debian's stock kernel: it reaches the host's Ceph
#      monitor through guestfwd only, and runs the kernel NVMe/TCP initiator
#      (nvme discover / connect / verify / disconnect) against the guest
#      kernel's own target.
# Ceph stays up afterwards for you to play with; `make demo-down` stops it.
#
# Usage: hack/demo.sh up|down|status [--help]
#   RACKCACHE_DEMO_DIR   where the demo keeps its state (default: _output/demo)
#   RACKCACHE_DEMO_PORT  Ceph monitor port (default: 13300)
source "$(dirname "$0")/lib.sh"


demo_dir="${RACKCACHE_DEMO_DIR:-$REPO_ROOT/_output/demo}"
mon_port="${RACKCACHE_DEMO_PORT:-13300}"
ceph_dir="$demo_dir/ceph"

say() { printf '\n\033[1;32m==> %s\033[0m\n' "$*"; }

ceph_step() {
  say "1/2 Ceph: one monitor, one manager, one bluestore OSD on 127.0.0.1:$mon_port"
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

  local img=demo-volume data="$demo_dir/pattern.bin" back="$demo_dir/readback.bin"
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

guest_step() {
  say "2/2 qemu guest (Debian's stock kernel, TCG): NVMe/TCP initiator; guestfwd to the Ceph monitor only"
  "$REPO_ROOT/hack/guest/build.sh" >/dev/null
  local started=$SECONDS
  local mon_v1_port="${RACKCACHE_CEPH_MON_V1##*:}"
  "$REPO_ROOT/hack/guest/run.sh" \
    --script "$REPO_ROOT/hack/guest/jobs/demo.sh" \
    --guestfwd "6789:$mon_v1_port" \
    --timeout 300 --log "$demo_dir/guest-console.log" | sed -n 's/^DEMO: /    /p'
  echo "    guest job passed in $((SECONDS - started)) s (console: $demo_dir/guest-console.log)"
}

up() {
  mkdir -p "$demo_dir"
  ceph_step
  guest_step
  say "Done. Still running: Ceph in $ceph_dir"
  cat <<MSG
    Use it:   export CEPH_CONF=$ceph_dir/ceph.conf; ceph -s; rbd ls
    Stop it:  make demo-down     (stops the daemons by PID and removes $demo_dir)
MSG
}

down() {
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
