#!/usr/bin/env bash
# Runs every set-up step `make test` needs, in two lanes side by side, and
# prints how long each step took. The lanes split the work so that one
# lane's waiting (apt and pip downloads, debootstrap, linking) overlaps the
# other lane's compiling on a two-core machine:
#   system: deps apt, deps python, the guest image, cargo-fuzz, the images
#           (which need the apt packages: the CSI image copies the host's
#           tools)
#   build:  deps go-tools, deps rust, the Kubernetes binaries and etcd
#           (hack/cluster/assets.sh: envtest's too), then the local
#           cluster's compute node (debootstrap; it needs the kubelet)
# Every step is idempotent and cached outside the clone (see README), so a
# warm run takes seconds. Each line of output starts with its lane's name
# and the seconds since the set-up began; a failing step stops its lane,
# the other lane finishes, and the script fails naming the step.
#
# Usage: hack/setup.sh [--help]
source "$(dirname "$0")/lib.sh"

case "${1:-}" in --help|-h) usage; exit 0 ;; "") ;; *) die "unknown argument: $1 (see --help)" ;; esac

# lane_run DIR NAME STEP...: run one lane, recording into DIR/NAME.
lane_run() {
  local dir="$1" name="$2" step label start rc
  shift 2
  : >"$dir/$name"
  for step in "$@"; do
    label="${step%%=*}"
    start=$(date +%s)
    rc=0
    eval "${step#*=}" 2>&1 | stamp "$name" || rc=$?
    echo "$label $(( $(date +%s) - start )) $rc" >>"$dir/$name"
    [ "$rc" = 0 ] || { echo "[$name] $label failed" >&2; return "$rc"; }
  done
}

# stamp NAME: prefixes each line with the lane's name and the seconds since
# the set-up started, so a log shows what ran when beside what.
stamp() {
  local line
  while IFS= read -r line; do printf '[%s %4ds] %s\n' "$1" "$SECONDS" "$line"; done
}

# lane_report DIR NAME...: print each lane's steps, seconds and failures.
lane_report() {
  local dir="$1" name label secs rc
  shift
  for name in "$@"; do
    [ -f "$dir/$name" ] || continue
    while read -r label secs rc; do
      log "  $(printf '%-8s %-20s %5s s' "$name" "$label" "$secs")$([ "$rc" = 0 ] || echo "  FAILED")"
    done <"$dir/$name"
  done
}

# lane_start DIR NAME STEP...: run a lane in the background (lanes_wait
# waits for it).
LANE_PIDS=()
lane_start() {
  lane_run "$@" &
  LANE_PIDS+=($!)
}

# lanes_wait: wait for every started lane; fails when one lane failed.
lanes_wait() {
  local pid rc=0
  for pid in "${LANE_PIDS[@]}"; do wait "$pid" || rc=1; done
  LANE_PIDS=()
  return "$rc"
}

times="$(mktemp -d)"
trap 'rm -rf "$times"' EXIT

start=$(date +%s)
lane_start "$times" system "deps-apt=hack/deps.sh apt" "deps-python=hack/deps.sh python" \
  "guest-image=hack/guest/build.sh" "deps-cargo-fuzz=hack/deps.sh cargo-fuzz" "images=hack/images.sh"
lane_start "$times" build "deps-go-tools=hack/deps.sh go-tools" "deps-rust=hack/deps.sh rust" \
  "k8s-binaries=hack/cluster/assets.sh" \
  'cluster-guest=hack/cluster/guest-build.sh "$(hack/cluster/assets.sh)/kubelet"'
rc=0
lanes_wait || rc=1
log "set-up steps (the two lanes ran side by side):"
lane_report "$times" system build
log "  set-up in all: $(( $(date +%s) - start )) s"
[ "$rc" = 0 ] || die "a set-up step failed (see above)"
