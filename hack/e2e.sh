#!/usr/bin/env bash
# Runs the e2e suite (test/e2e) on the local cluster of hack/cluster.sh:
# brings the cluster up, sets the suite's inputs, runs the specs and takes
# the cluster down again (also when a spec fails).
#
# Usage: hack/e2e.sh smoke|full [--keep] [--help]
#   smoke    the specs labelled smoke (what `make test` runs)
#   full     every spec (`make test-e2e`)
#   --keep   leave the cluster up afterwards (hack/cluster.sh down stops it)
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

what="${1:-}"; shift || true
keep=0
for arg in "$@"; do
  case "$arg" in
    --keep) keep=1 ;;
    *) die "unknown argument: $arg (see --help)" ;;
  esac
done
case "$what" in
  --help|-h) usage; exit 0 ;;
  smoke) filter="smoke" ;;
  full) filter="" ;;
  *) usage; exit 2 ;;
esac

cluster="$REPO_ROOT/hack/cluster.sh"
if [ "$keep" = 0 ]; then trap '"$cluster" down' EXIT; fi
start=$SECONDS
"$cluster" up >/dev/null
log "cluster up in $((SECONDS - start)) s"
# shellcheck source=/dev/null
source "${RACKCACHE_CLUSTER_DIR:-$REPO_ROOT/_output/cluster}/env"
export RACKCACHE_E2E_VALUES="$REPO_ROOT/hack/cluster/values.yaml"

suite=$SECONDS
# -v streams ginkgo's progress as it happens.
args=(-v -count=1 -timeout 60m ./test/e2e -ginkgo.v)
[ -n "$filter" ] && args+=(-ginkgo.label-filter="$filter")
go test "${args[@]}"
log "e2e ($what) passed in $((SECONDS - suite)) s; with the cluster's start $((SECONDS - start)) s"
