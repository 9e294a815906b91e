#!/usr/bin/env bash
# Builds kube-apiserver and etcd from source through the Go module proxy (no
# prebuilt download is reachable) into $RACKCACHE_CACHE/k8s/<version>/, linked
# as bin/k8s/<version>, for envtest's KUBEBUILDER_ASSETS. Nothing is rebuilt
# when the binaries are already there.
#
# Usage: hack/envtest-assets.sh [--print-dir] [--help]
#   --print-dir   only print the assets directory (build first if needed)
source "$(dirname "$0")/lib.sh"

print_only=false
for arg in "$@"; do
  case "$arg" in
    --help|-h) usage; exit 0 ;;
    --print-dir) print_only=true ;;
    *) die "unknown argument: $arg (see --help)" ;;
  esac
done

assets="$RACKCACHE_CACHE/k8s/$K8S_VERSION"

# apiserver_current: the cached kube-apiserver reports this release (builds
# before the version stamp reported v0.0.0-master and are rebuilt).
apiserver_current() {
  [ -x "$assets/kube-apiserver" ] && "$assets/kube-apiserver" --version 2>/dev/null | grep -qx "Kubernetes v$K8S_VERSION"
}

# build_apiserver makes a wrapper module that requires k8s.io/kubernetes at the
# release and points every staging module (k8s.io/kubernetes's go.mod maps them
# to ./staging) at its published v0.X.Y release, then builds kube-apiserver.
build_apiserver() {
  apiserver_current && return 0
  local work="$RACKCACHE_CACHE/k8s/src/apiserver-$K8S_VERSION"
  local staging_version="v0.${K8S_VERSION#1.}"
  log "building kube-apiserver v$K8S_VERSION from source (cold: ~8 min)"
  if [ -f "$work/go.mod" ] && [ -x "$assets/kube-apiserver" ]; then
    # Only the version stamp is missing: rebuild from the wrapper as it is.
    (cd "$work" && go build -trimpath -ldflags "$(k8s_version_ldflags)" -o "$assets/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
    mv "$assets/kube-apiserver.tmp" "$assets/kube-apiserver"
    return 0
  fi
  rm -rf "$work" && mkdir -p "$work" && cd "$work"
  go mod init rackcache.io/k8s-wrapper >/dev/null 2>&1
  local upstream_gomod
  upstream_gomod="$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  [ -f "$upstream_gomod" ] || die "could not download k8s.io/kubernetes@v$K8S_VERSION's go.mod"
  {
    echo "require k8s.io/kubernetes v$K8S_VERSION"
    echo "replace ("
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging_version"'#p' "$upstream_gomod"
    echo ")"
  } >>go.mod
  go get "k8s.io/kubernetes/cmd/kube-apiserver@v$K8S_VERSION"
  mkdir -p "$assets"
  # Stamp the release, as the upstream build does: clients such as helm
  # check a chart's kubeVersion against what /version reports.
  go build -trimpath -ldflags "$(k8s_version_ldflags)" -o "$assets/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
  mv "$assets/kube-apiserver.tmp" "$assets/kube-apiserver"
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
  go build -trimpath -o "$assets/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$assets/etcd.tmp" "$assets/etcd"
}

build_all() {
  build_apiserver
  build_etcd
}

if ! { apiserver_current && [ -x "$assets/etcd" ]; }; then
  with_lock "k8s-$K8S_VERSION" build_all
fi
mkdir -p "$REPO_ROOT/bin/k8s"
ln -sfn "$assets" "$REPO_ROOT/bin/k8s/$K8S_VERSION"
if $print_only; then echo "$assets"; else log "envtest assets ready in $assets"; fi
