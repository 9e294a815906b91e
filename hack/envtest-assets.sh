#!/usr/bin/env bash
# Builds kube-apiserver and etcd from source through the Go module proxy (no
# prebuilt download is reachable) into $RACKCACHE_CACHE/k8s/<version>/, linked
# as bin/k8s/<version>, for envtest's KUBEBUILDER_ASSETS. Nothing is rebuilt
# when the binaries are already there. With --cluster it also builds what
# a cluster's control plane and node run (kubelet, kube-scheduler,
# kube-controller-manager; hack/cluster/assets.sh): one `go build` makes
# all four Kubernetes binaries, so their shared packages compile once and
# one binary links while the next compiles, and etcd (a module of its own)
# builds beside it.
#
# Usage: hack/envtest-assets.sh [--print-dir] [--cluster] [--help]
#   --print-dir   only print the assets directory (build first if needed)
#   --cluster     also kubelet, kube-scheduler and kube-controller-manager
source "$(dirname "$0")/lib.sh"

print_only=false
COMPONENTS=(kube-apiserver)
for arg in "$@"; do
  case "$arg" in
    --help|-h) usage; exit 0 ;;
    --print-dir) print_only=true ;;
    --cluster) COMPONENTS+=(kubelet kube-scheduler kube-controller-manager) ;;
    *) die "unknown argument: $arg (see --help)" ;;
  esac
done

assets="$RACKCACHE_CACHE/k8s/$K8S_VERSION"

# current NAME: the cached binary reports this release (kube-apiserver builds
# before the version stamp reported v0.0.0-master and are rebuilt).
current() {
  [ -x "$assets/$1" ] && "$assets/$1" --version 2>/dev/null | grep -qx "Kubernetes v$K8S_VERSION"
}

# missing_components prints the COMPONENTS not yet built at this release.
missing_components() {
  local c
  for c in "${COMPONENTS[@]}"; do current "$c" || echo "$c"; done
}

# make_wrapper makes a module that requires k8s.io/kubernetes at the release
# and points every staging module (k8s.io/kubernetes's go.mod maps them to
# ./staging) at its published v0.X.Y release.
make_wrapper() {
  local work="$1" staging_version="v0.${K8S_VERSION#1.}" upstream_gomod
  [ -f "$work/go.sum" ] && return 0
  rm -rf "$work" && mkdir -p "$work"
  (
    cd "$work"
    go mod init rackcache.io/k8s-wrapper >/dev/null 2>&1
    upstream_gomod="$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
    [ -f "$upstream_gomod" ] || die "could not download k8s.io/kubernetes@v$K8S_VERSION's go.mod"
    {
      echo "require k8s.io/kubernetes v$K8S_VERSION"
      echo "replace ("
      sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging_version"'#p' "$upstream_gomod"
      echo ")"
    } >>go.mod
  )
}

# build_kubernetes builds the missing components in one `go build`, stamped
# with the release as the upstream build does (clients such as helm check a
# chart's kubeVersion against what /version reports).
build_kubernetes() {
  local work="$RACKCACHE_CACHE/k8s/src/apiserver-$K8S_VERSION" c pkgs=() missing
  mapfile -t missing < <(missing_components)
  [ ${#missing[@]} -gt 0 ] || return 0
  log "building ${missing[*]} v$K8S_VERSION from source (cold: ~8 min for kube-apiserver, ~3 more for the other three)"
  make_wrapper "$work"
  for c in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  mkdir -p "$assets" "$work/bin"
  (
    cd "$work"
    for c in "${missing[@]}"; do go get "k8s.io/kubernetes/cmd/$c@v$K8S_VERSION"; done
    # -s -w: no symbol table or DWARF, which take a good part of linking
    # four binaries of this size and which nothing here reads.
    go build -trimpath -ldflags "-s -w $(k8s_version_ldflags)" -o "$work/bin/" "${pkgs[@]}"
  )
  for c in "${missing[@]}"; do
    [ -x "$work/bin/$c" ] || die "go build made no $c in $work/bin"
    mv "$work/bin/$c" "$assets/$c"
  done
}

# build_etcd: `go install etcd@version` fails on etcd's replace directives, so
# build it from a wrapper module as well.
build_etcd() {
  [ -x "$assets/etcd" ] && return 0
  local work="$RACKCACHE_CACHE/k8s/src/etcd-$ETCD_VERSION"
  log "building etcd v$ETCD_VERSION from source (cold: ~2 min)"
  rm -rf "$work" && mkdir -p "$work" && cd "$work"
  go mod init rackcache.io/etcd-wrapper >/dev/null 2>&1
  go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
  mkdir -p "$assets"
  go build -trimpath -ldflags "-s -w" -o "$assets/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$assets/etcd.tmp" "$assets/etcd"
}

# build_all builds etcd (its own module) beside the Kubernetes binaries.
build_all() {
  local etcd_pid=""
  if [ ! -x "$assets/etcd" ]; then
    build_etcd &
    etcd_pid=$!
  fi
  build_kubernetes
  [ -z "$etcd_pid" ] || wait "$etcd_pid" || die "building etcd v$ETCD_VERSION failed"
}

if [ -n "$(missing_components)" ] || [ ! -x "$assets/etcd" ]; then
  with_lock "k8s-$K8S_VERSION" build_all
fi
mkdir -p "$REPO_ROOT/bin/k8s"
ln -sfn "$assets" "$REPO_ROOT/bin/k8s/$K8S_VERSION"
if $print_only; then echo "$assets"; else log "envtest assets ready in $assets"; fi
