#!/usr/bin/env bash
# Runs the dataplane's cargo-fuzz targets, each for a bounded time, with a
# fixed seed so a run is repeatable. New inputs go to a corpus outside the
# repository's seed folders; crashes, inputs slower than 10 s (hangs) and
# out-of-memory inputs land in fuzz/artifacts and fail the run.
#
# Usage: hack/fuzz.sh [SECONDS_PER_TARGET] [--help]   (default 20)
# cargo-fuzz needs nightly compiler flags: the nightly toolchain is used when
# rustup has one, otherwise stable with RUSTC_BOOTSTRAP=1.
source "$(dirname "$0")/lib.sh"

case "${1:-}" in --help|-h) usage; exit 0 ;; esac
seconds="${1:-20}"
[[ "$seconds" =~ ^[0-9]+$ ]] || die "SECONDS_PER_TARGET must be a whole number, got '$seconds'"

"$REPO_ROOT/hack/deps.sh" cargo-fuzz >/dev/null
if rustup run nightly rustc --version >/dev/null 2>&1; then
  export RUSTUP_TOOLCHAIN=nightly
else
  export RUSTC_BOOTSTRAP=1
fi

# fuzz crate dir : target name : seed dir (relative to the crate dir).
# RACKCACHE_FUZZ_TARGETS (same format, space-separated) replaces the list;
# test/infra uses it to check that a broken target fails this script.
TARGETS=(
  "dataplane/nvmf/fuzz:pdu_stream:seeds/pdu"
  "dataplane/nvmf/fuzz:connection:seeds/connection"
)
if [[ -n "${RACKCACHE_FUZZ_TARGETS:-}" ]]; then
  read -r -a TARGETS <<<"$RACKCACHE_FUZZ_TARGETS"
fi
for t in "${TARGETS[@]}"; do
  IFS=: read -r dir target seeds <<<"$t"
  corpus="$RACKCACHE_CACHE/fuzz-corpus/$target"
  mkdir -p "$corpus"
  log "fuzzing $target for ${seconds}s"
  out="$(mktemp)"
  # cargo-fuzz's own exit status counts: a target that does not build, or a
  # libFuzzer run that fails, fails this script.
  status=0
  (cd "$REPO_ROOT/$dir" && "$REPO_ROOT/bin/cargo-fuzz" run "$target" "$corpus" "$seeds" -- \
      -max_total_time="$seconds" -timeout=10 -seed=1 -print_final_stats=1) >"$out" 2>&1 || status=$?
  grep -E '^(Done|stat::number_of_executed_units|INFO: seed corpus)|panicked|SUMMARY|crash|timeout|^error' "$out" || true
  if [[ $status -ne 0 ]]; then
    tail -n 40 "$out" >&2
    rm -f "$out"
    die "$target: cargo fuzz run failed with exit status $status"
  fi
  # A run that executed nothing (no inputs, an instant exit) proves nothing.
  executed=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$out" | tail -n 1)
  rm -f "$out"
  [[ "${executed:-0}" -gt 0 ]] || die "$target: libFuzzer reported no executed inputs"
  log "$target: $executed inputs executed"
  found=$(shopt -s nullglob; echo "$REPO_ROOT/$dir/artifacts/$target"/{crash,timeout,oom}-*)
  [[ -z "$found" ]] || die "$target found a crash or hang: $found"
done
