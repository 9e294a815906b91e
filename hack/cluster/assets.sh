#!/usr/bin/env bash
# Builds the rest of a cluster's Kubernetes binaries from source through the
# Go module proxy: kubelet, kube-scheduler and kube-controller-manager, from
# the wrapper module that hack/envtest-assets.sh makes for kube-apiserver
# (each ~30-60 s once the apiserver is built). They land next to
# kube-apiserver and etcd in $RACKCACHE_CACHE/k8s/<version>/, whose path this
# prints.
#
# Usage: hack/cluster/assets.sh [--help]
source "$(dirname "$0")/../lib.sh"

case "${1:-}" in --help|-h) usage; exit 0 ;; "") ;; *) die "unknown argument: $1" ;; esac

assets="$("$REPO_ROOT/hack/envtest-assets.sh" --print-dir)"
COMPONENTS=(kubelet kube-scheduler kube-controller-manager)

build() {
  local work="$RACKCACHE_CACHE/k8s/src/apiserver-$K8S_VERSION" c
  [ -f "$work/go.mod" ] || die "no wrapper module in $work (hack/envtest-assets.sh makes it)"
  local ldflags
  ldflags="$(k8s_version_ldflags)"
  for c in "${COMPONENTS[@]}"; do
    [ -x "$assets/$c" ] && continue
    log "building $c v$K8S_VERSION"
    (cd "$work" && go get "k8s.io/kubernetes/cmd/$c@v$K8S_VERSION" \
      && go build -trimpath -ldflags "$ldflags" -o "$assets/$c.tmp" "k8s.io/kubernetes/cmd/$c") \
      || die "building $c failed"
    mv "$assets/$c.tmp" "$assets/$c"
  done
}

missing=0
for c in "${COMPONENTS[@]}"; do [ -x "$assets/$c" ] || missing=1; done
if [ "$missing" = 1 ]; then with_lock "k8s-$K8S_VERSION" build; fi
echo "$assets"
