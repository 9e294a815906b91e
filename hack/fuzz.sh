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
  "dataplane/nvmf/fuzz:auth_messages:seeds/auth"
  "dataplane/daemon/fuzz:rpc_requests:seeds/rpc"
  "dataplane/cache/fuzz:cached_io:seeds/io"
)
if [[ -n "${RACKCACHE_FUZZ_TARGETS:-}" ]]; then
  read -r -a TARGETS <<<"$RACKCACHE_FUZZ_TARGETS"
fi
# One build of every target first (each fuzz crate once), then the targets
# side by side: each libFuzzer run is one process on one core. The fuzz
# crates are workspaces of their own (sanitizer flags must not reach the
# main one) but share one target directory, so the dependencies they have
# in common (tokio, serde, the cache and bdev crates...) compile once. That
# directory is a build cache outside the clone, keyed by the compiler: a
# fresh clone recompiles only the repository's own crates (cargo's
# fingerprints decide), not the sanitized dependencies. It is emptied when
# it outgrows FUZZ_TARGET_MAX_GIB (each clone path adds its own crates).
fuzz_target_dir="$RACKCACHE_CACHE/fuzz-target/$(rustc -V | sha256sum | cut -c1-12)"
max_gib="${FUZZ_TARGET_MAX_GIB:-12}"
if [[ -d "$fuzz_target_dir" ]] && (( $(du -s --block-size=1G "$fuzz_target_dir" | cut -f1) > max_gib )); then
  log "the fuzz build cache passed ${max_gib} GiB: starting it afresh"
  rm -rf "$fuzz_target_dir"
fi
mkdir -p "$fuzz_target_dir"
declare -A built=()
for t in "${TARGETS[@]}"; do
  IFS=: read -r dir target seeds <<<"$t"
  [[ -n "${built[$dir]:-}" ]] && continue
  log "building the fuzz targets of $dir"
  (cd "$REPO_ROOT/$dir" && "$REPO_ROOT/bin/cargo-fuzz" build --target-dir "$fuzz_target_dir") \
    || die "$dir: cargo fuzz build failed"
  built[$dir]=1
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
pids=()
for i in "${!TARGETS[@]}"; do
  IFS=: read -r dir target seeds <<<"${TARGETS[$i]}"
  corpus="$RACKCACHE_CACHE/fuzz-corpus/$target"
  mkdir -p "$corpus"
  log "fuzzing $target for ${seconds}s"
  # cargo-fuzz's own exit status counts: a target that does not build, or a
  # libFuzzer run that fails, fails this script.
  (cd "$REPO_ROOT/$dir" && "$REPO_ROOT/bin/cargo-fuzz" run --target-dir "$fuzz_target_dir" "$target" "$corpus" "$seeds" -- \
      -max_total_time="$seconds" -timeout=10 -seed=1 -print_final_stats=1) >"$work/$i.out" 2>&1 &
  pids[$i]=$!
done

failed=0
for i in "${!TARGETS[@]}"; do
  IFS=: read -r dir target seeds <<<"${TARGETS[$i]}"
  out="$work/$i.out"
  status=0
  wait "${pids[$i]}" || status=$?
  grep -E '^(Done|stat::number_of_executed_units|INFO: seed corpus)|panicked|SUMMARY|crash|timeout|^error' "$out" | sed "s/^/$target: /" || true
  if [[ $status -ne 0 ]]; then
    tail -n 40 "$out" >&2
    log "$target: cargo fuzz run failed with exit status $status"
    failed=1
    continue
  fi
  # A run that executed nothing (no inputs, an instant exit) proves nothing.
  executed=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$out" | tail -n 1)
  if [[ "${executed:-0}" -le 0 ]]; then
    log "$target: libFuzzer reported no executed inputs"
    failed=1
    continue
  fi
  log "$target: $executed inputs executed"
  found=$(shopt -s nullglob; echo "$REPO_ROOT/$dir/artifacts/$target"/{crash,timeout,oom}-*)
  if [[ -n "$found" ]]; then
    log "$target found a crash or hang: $found"
    failed=1
  fi
done
[[ $failed = 0 ]] || die "a fuzz target failed (see above)"
