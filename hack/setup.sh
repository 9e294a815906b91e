#!/usr/bin/env bash
# Runs every set-up step `make test` needs, in two lanes side by side, and
# prints how long each step took. The lanes split the work so that one
# lane's waiting (apt and pip downloads, debootstrap, linking) overlaps the
# other lane's compiling on a two-core machine:
#   system: deps apt, deps python, the guest image, the images (which need
#           the apt packages: the CSI image copies the host's tools)
#   build:  deps go-tools, deps rust, deps cargo-fuzz, the Kubernetes
#           binaries and etcd (hack/cluster/assets.sh: envtest's too)
# Every step is idempotent and cached outside the clone (see README), so a
# warm run takes seconds. Each line of output carries its lane's name; a
# failing step stops its lane, the other lane finishes, and the script
# fails naming the step.
#
# Usage: hack/setup.sh [--help]
source "$(dirname "$0")/lib.sh"

case "${1:-}" in --help|-h) usage; exit 0 ;; "") ;; *) die "unknown argument: $1 (see --help)" ;; esac

times="$(mktemp)"
trap 'rm -f "$times" "$times".*' EXIT

# lane NAME STEP...: run the steps (each "label=command args") one after
# another, their output prefixed with the lane's name; record each step's
# seconds. Stops at the first failing step.
lane() {
  local name="$1" step label start rc
  shift
  for step in "$@"; do
    label="${step%%=*}"
    start=$(date +%s)
    rc=0
    # shellcheck disable=SC2086 # the command is a plain word list
    ${step#*=} 2>&1 | sed -u "s/^/[$name] /" || rc=$?
    echo "$label $(( $(date +%s) - start )) $rc" >>"$times.$name"
    [ "$rc" = 0 ] || { echo "[$name] $label failed (exit $rc)" >&2; return "$rc"; }
  done
}

start=$(date +%s)
lane system "deps-apt=hack/deps.sh apt" "deps-python=hack/deps.sh python" \
  "guest-image=hack/guest/build.sh" "images=hack/images.sh" &
system_pid=$!
lane build "deps-go-tools=hack/deps.sh go-tools" "deps-rust=hack/deps.sh rust" \
  "deps-cargo-fuzz=hack/deps.sh cargo-fuzz" "k8s-binaries=hack/cluster/assets.sh" &
build_pid=$!
rc=0
wait "$system_pid" || rc=1
wait "$build_pid" || rc=1

log "set-up steps (seconds; the two lanes ran side by side):"
for l in system build; do
  [ -f "$times.$l" ] || continue
  while read -r label secs step_rc; do
    log "  $l  $(printf '%-16s %5s s' "$label" "$secs")$([ "$step_rc" = 0 ] || echo "  FAILED (exit $step_rc)")"
  done <"$times.$l"
done
log "  set-up in all: $(( $(date +%s) - start )) s"
[ "$rc" = 0 ] || die "a set-up step failed (see above)"
