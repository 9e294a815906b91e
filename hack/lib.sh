#!/usr/bin/env bash
# Shared helpers for the hack/ scripts. Source it; do not run it.
#
# Everything built or downloaded lives in a cache outside the clone, keyed by
# version, so that a fresh clone on the same machine (CI's) reuses it:
#   RACKCACHE_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/rackcache)
# The clone's bin/ holds only symlinks into that cache.

set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RACKCACHE_CACHE="${RACKCACHE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rackcache}"
export RACKCACHE_CACHE REPO_ROOT

# Go must never download a toolchain of its own (none is reachable).
export GOTOOLCHAIN=local

# Pinned versions (see ../shared/NOTES-INFRA.md for why these).
K8S_VERSION="${K8S_VERSION:-1.34.4}"
ETCD_VERSION="${ETCD_VERSION:-3.5.35}"

# The CPU model of every qemu guest (the test guest, the demo's, the
# cluster's compute node). Not `max`: under multi-threaded TCG with two
# vCPUs, qemu 7.2's `-cpu max` guests have hung with both vCPUs spinning
# (the cluster's node: "soft lockup - CPU#0 stuck for 246s", RCU stalls)
# and stayed silent at boot (the demo's guest, issue 30); other projects
# report the same hang with `-cpu max -smp 2` and none with a named model.
# Nehalem has what the guests use (SSE4.2 for the kernel's crc32c, which
# NVMe/TCP digests use) and none of max's newer features (PCID/INVPCID,
# x2APIC, the TSC deadline timer, 5-level paging, AVX).
GUEST_CPU="${RACKCACHE_GUEST_CPU:-Nehalem}"

# k8s_version_ldflags: -ldflags that stamp K8S_VERSION into a Kubernetes
# binary built from source, as the upstream build does (`--version`,
# /version; helm checks charts' kubeVersion against it).
k8s_version_ldflags() {
  echo "-X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$K8S_VERSION")"
}

# The Debian release of the test guest (hack/guest): trixie's kernel 6.12
# has NVMe in-band authentication (DH-HMAC-CHAP) and NVMe/TCP TLS, which
# bookworm's 6.1 lacks. Its packages are read through a package list of
# their own in the cache (guest_apt), never installed on this machine.
GUEST_SUITE="${RACKCACHE_GUEST_SUITE:-trixie}"
APT_OPTS=()

# guest_apt sets APT_OPTS to apt options that read GUEST_SUITE's package
# lists from the cache, from the same mirrors as this machine's apt (and
# its apt.conf: proxies), fetching them when absent or a day old.
guest_apt() {
  local dir="$RACKCACHE_CACHE/apt/$GUEST_SUITE" main security
  mkdir -p "$dir/lists/partial" "$dir/archives/partial" "$dir/sources.list.d"
  local repos
  repos="$(apt-get indextargets --format '$(REPO_URI)' 2>/dev/null | sort -u)"
  main="$(grep -v -- '-security/' <<<"$repos" | head -1 || true)"
  security="$(grep -- '-security/' <<<"$repos" | head -1 || true)"
  main="${main:-http://deb.debian.org/debian/}"
  security="${security:-http://deb.debian.org/debian-security/}"
  local key=/usr/share/keyrings/debian-archive-keyring.gpg
  printf 'deb [signed-by=%s] %s %s main\ndeb [signed-by=%s] %s %s-security main\n' \
    "$key" "$main" "$GUEST_SUITE" "$key" "$security" "$GUEST_SUITE" >"$dir/sources.list"
  APT_OPTS=(-o "Dir::Etc::SourceList=$dir/sources.list" -o "Dir::Etc::SourceParts=$dir/sources.list.d"
    -o "Dir::State::Lists=$dir/lists" -o "Dir::State::status=/dev/null"
    -o "Dir::Cache=$dir" -o "APT::Architecture=amd64")
  if [ -z "$(find "$dir/lists" -maxdepth 1 -name '*_Packages*' -mtime -1 2>/dev/null | head -1)" ]; then
    log "fetching $GUEST_SUITE's package lists"
    apt-get "${APT_OPTS[@]}" update -q >/dev/null || die "apt-get update of $GUEST_SUITE failed"
  fi
}

# debian_kernel sets kernel_pkg, kernel_version and kver to Debian's stock
# kernel package (linux-image-amd64 is a metapackage; the kernel is the
# package it depends on), the version apt would install and its release;
# of this machine's release, or of the one APT_OPTS selects (guest_apt).
debian_kernel() {
  local opts=("${APT_OPTS[@]}")
  kernel_pkg="$(apt-cache "${opts[@]}" depends linux-image-amd64 2>/dev/null \
    | awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }')"
  [ -n "$kernel_pkg" ] || die "cannot resolve linux-image-amd64 (run apt-get update)"
  kernel_version="$(apt-cache "${opts[@]}" policy "$kernel_pkg" | awk '$1 == "Candidate:" { print $2 }')"
  [ -n "$kernel_version" ] && [ "$kernel_version" != "(none)" ] \
    || die "no installable version of $kernel_pkg (run apt-get update)"
  kver="${kernel_pkg#linux-image-}"
}

log() { printf '\033[1m[%s]\033[0m %s\n' "$(basename "$0")" "$*" >&2; }
die() { printf '[%s] error: %s\n' "$(basename "$0")" "$*" >&2; exit 1; }

# as_root runs a command as root (directly when we are root, else via sudo).
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# link_into_bin NAME TARGET: make bin/NAME a symlink to TARGET in the cache.
link_into_bin() {
  local name="$1" target="$2"
  mkdir -p "$REPO_ROOT/bin"
  ln -sfn "$target" "$REPO_ROOT/bin/$name"
}

# with_lock NAME CMD...: run CMD holding an exclusive lock in the cache, so
# that two runs (a developer's and CI's) never build the same asset at once.
with_lock() {
  local name="$1"; shift
  mkdir -p "$RACKCACHE_CACHE/locks"
  (
    flock 9
    "$@"
  ) 9>"$RACKCACHE_CACHE/locks/$name.lock"
}

# usage prints the comment block at the top of the calling script (its help).
usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
}
