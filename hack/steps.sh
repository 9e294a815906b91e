#!/usr/bin/env bash
# Runs make targets one after another (what `make test` is) and prints how
# long each took, also when one fails: the per-step figures of README's
# table come from this summary.
#
# Usage: hack/steps.sh TARGET... [--help]
source "$(dirname "$0")/lib.sh"

case "${1:-}" in --help|-h|"") usage; exit 0 ;; esac

summary=()
overall=$(date +%s)
report() {
  log "steps (seconds):"
  local line
  for line in "${summary[@]}"; do log "  $line"; done
  log "  in all: $(( $(date +%s) - overall )) s"
}
trap report EXIT

for target in "$@"; do
  start=$(date +%s)
  rc=0
  "${MAKE:-make}" --no-print-directory "$target" || rc=$?
  summary+=("$(printf '%-16s %5s s' "$target" "$(( $(date +%s) - start ))")$([ "$rc" = 0 ] || echo "  FAILED (exit $rc)")")
  [ "$rc" = 0 ] || exit "$rc"
done
