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
# warm run takes seconds. Each line of output carries its lane's name; a
# failing step stops its lane, the other lane finishes, and the script
# fails naming the step.
#
# Usage: hack/setup.sh [--help]
source "$(dirname "$0")/lib.sh"
source "$REPO_ROOT/hack/lanes.sh"

case "${1:-}" in --help|-h) usage; exit 0 ;; "") ;; *) die "unknown argument: $1 (see --help)" ;; esac

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
