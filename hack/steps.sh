#!/usr/bin/env bash
# Runs make targets one after another (what `make test` is) and prints how
# long each took, also when one fails: the per-step figures of README's
# table come from this summary.
#
# The test steps run one at a time on purpose: beside the Rust tests, the
# guest-heavy Go packages (test/csi, test/dataplane) took 730-760 s each
# instead of 390-510 s on two cores, and a cold `make test` was no faster.
#
# Usage: hack/steps.sh TARGET... [--help]
source "$(dirname "$0")/lib.sh"

case "${1:-}" in --help|-h|"") usage; exit 0 ;; esac

make="${MAKE:-make}"
summary=()
overall=$(date +%s)
report() {
  local line
  log "steps (seconds):"
  for line in "${summary[@]}"; do log "  $line"; done
  log "  in all: $(( $(date +%s) - overall )) s"
}
trap report EXIT

for target in "$@"; do
  start=$(date +%s)
  rc=0
  "$make" --no-print-directory "$target" || rc=$?
  summary+=("$(printf '%-16s %5s s' "$target" "$(( $(date +%s) - start ))")$([ "$rc" = 0 ] || echo "  FAILED")")
  [ "$rc" = 0 ] || exit "$rc"
done
