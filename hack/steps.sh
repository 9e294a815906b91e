#!/usr/bin/env bash
# Runs make targets in a row (what `make test` is) and prints how long each
# took, also when one fails: the per-step figures of README's table come
# from this summary. An argument with `|` in it is lanes side by side: the
# targets between the bars run one after another in their lane, e.g.
#   hack/steps.sh setup "verify-go test-go | verify-rust test-rust"
# runs setup, then the Go and the Rust checks and tests at the same time
# (each line of their output carries its lane's name: go, rust, ...).
#
# Usage: hack/steps.sh STEP... [--help]
source "$(dirname "$0")/lib.sh"
source "$REPO_ROOT/hack/lanes.sh"

case "${1:-}" in --help|-h|"") usage; exit 0 ;; esac

make="${MAKE:-make}"
times="$(mktemp -d)"
order=()
overall=$(date +%s)
report() {
  log "steps (seconds; lanes ran side by side):"
  lane_report "$times" "${order[@]}"
  log "  in all: $(( $(date +%s) - overall )) s"
  rm -rf "$times"
}
trap report EXIT

n=0
for arg in "$@"; do
  if [[ "$arg" != *"|"* ]]; then
    # A step of its own: no lane, no prefix ("_" names hide in the report).
    n=$((n + 1)); order+=("_$n")
    start=$(date +%s)
    rc=0
    "$make" --no-print-directory "$arg" || rc=$?
    echo "$arg $(( $(date +%s) - start )) $rc" >"$times/_$n"
    [ "$rc" = 0 ] || exit "$rc"
    continue
  fi
  IFS='|' read -ra specs <<<"$arg"
  for spec in "${specs[@]}"; do
    read -ra targets <<<"$spec"
    [ ${#targets[@]} -gt 0 ] || die "an empty lane in \"$arg\""
    # The lane is named after its first target's family (verify-go: go).
    name="${targets[0]##*-}"
    steps=()
    for t in "${targets[@]}"; do steps+=("$t=$make --no-print-directory $t"); done
    order+=("$name")
    lane_start "$times" "$name" "${steps[@]}"
  done
  lanes_wait || exit 1
done
