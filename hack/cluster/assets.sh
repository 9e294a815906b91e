#!/usr/bin/env bash
# Builds a cluster's Kubernetes binaries from source through the Go module
# proxy: kube-apiserver and etcd (as for envtest) and kubelet, kube-scheduler
# and kube-controller-manager, in one `go build` (hack/envtest-assets.sh
# --cluster). They land in $RACKCACHE_CACHE/k8s/<version>/, whose path this
# prints. Nothing is rebuilt when they are there.
#
# Usage: hack/cluster/assets.sh [--help]
source "$(dirname "$0")/../lib.sh"

case "${1:-}" in --help|-h) usage; exit 0 ;; "") ;; *) die "unknown argument: $1" ;; esac

exec "$REPO_ROOT/hack/envtest-assets.sh" --cluster --print-dir
