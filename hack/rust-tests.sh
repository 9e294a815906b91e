#!/usr/bin/env bash
# Runs the dataplane workspace's tests as `cargo test --workspace` does (one
# build, every test binary, then the doc tests), but two test binaries at a
# time. Many binaries mostly wait (for a one-node Ceph to start, for a
# daemon to flush to RADOS), and cargo runs binaries one after another, so
# on two cores the waits of one overlap the work of another. The longest
# binaries start first: each run records how long each binary took in
# $RACKCACHE_CACHE/rust-test-seconds and the next run orders by it (the
# first run keeps cargo's order). A binary is known by its name and its
# package's folder in the clone, so any clone on the machine shares them.
#
# Each binary runs as cargo runs it: from its package's directory, with
# CARGO_MANIFEST_DIR set. Its output is printed when it ends (whole when it
# failed, its summary line when it passed); every binary runs even after a
# failure, and the script fails naming each failed binary.
#
# Usage: hack/rust-tests.sh [--help]
#   RACKCACHE_RUST_TEST_JOBS   binaries at a time (default 2)
#   CARGO                      cargo to run (default cargo)
source "$(dirname "$0")/lib.sh"

case "${1:-}" in --help|-h) usage; exit 0 ;; "") ;; *) die "unknown argument: $1 (see --help)" ;; esac
jobs="${RACKCACHE_RUST_TEST_JOBS:-2}"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || die "RACKCACHE_RUST_TEST_JOBS must be a positive number, got '$jobs'"
command -v jq >/dev/null || die "jq is missing (hack/deps.sh apt installs it)"
cargo="${CARGO:-cargo}"
history="$RACKCACHE_CACHE/rust-test-seconds"
mkdir -p "$RACKCACHE_CACHE"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cd "$REPO_ROOT/dataplane"
log "building the workspace's tests"
"$cargo" test --workspace --no-run --message-format=json-render-diagnostics >"$work/build.json"
# "executable<TAB>package directory" of each test binary.
jq -r 'select(.reason == "compiler-artifact" and .profile.test and .executable != null)
       | [.executable, (.manifest_path | sub("/Cargo.toml$"; ""))] | @tsv' \
  "$work/build.json" | sort -u >"$work/binaries"
[ -s "$work/binaries" ] || die "cargo built no test binary"

# Longest first by the last run's seconds (unknown binaries first: they may
# be long); the key is the binary's name without cargo's hash.
awk -F'\t' -v root="$REPO_ROOT/" 'FILENAME == ARGV[1] { secs[$1] = $2; next }
  { name = $1; sub(/.*\//, "", name); sub(/-[0-9a-f]+$/, "", name)
    dir = $2; if (index(dir, root) == 1) dir = substr(dir, length(root) + 1)
    key = name " " dir
    print ((key in secs) ? secs[key] : 1e9) "\t" $0 }' \
  <(cat "$history" 2>/dev/null || true) "$work/binaries" \
  | sort -t$'\t' -k1,1gr | cut -f2- >"$work/order"
log "running $(wc -l <"$work/order") test binaries, $jobs at a time"

# run_one EXE DIR: one binary; appends "key<TAB>seconds<TAB>status" to
# $work/results and prints its output.
run_one() {
  local exe="$1" dir="$2" name out start status=0 secs
  name="$(basename "$exe")"; name="${name%-*}"
  out="$work/$(basename "$exe").out"
  start=$(date +%s)
  (cd "$dir" && CARGO_MANIFEST_DIR="$dir" "$exe") >"$out" 2>&1 || status=$?
  secs=$(( $(date +%s) - start ))
  printf '%s %s\t%s\t%s\n' "$name" "${dir#"$REPO_ROOT"/}" "$secs" "$status" >>"$work/results"
  if [ "$status" = 0 ]; then
    printf '%s (%s, %d s): %s\n' "$name" "${dir#"$REPO_ROOT"/}" "$secs" "$(grep '^test result:' "$out" | tail -n 1)"
  else
    cat "$out"
    printf '%s (%s): FAILED with exit status %s after %d s\n' "$name" "${dir#"$REPO_ROOT"/}" "$status" "$secs"
  fi
}
export -f run_one
export work REPO_ROOT

tr '\t' '\n' <"$work/order" | xargs -d '\n' -n 2 -P "$jobs" bash -c 'run_one "$1" "$2"' _

log "running the doc tests"
doc_status=0
"$cargo" test --workspace --doc || doc_status=$?

# Keep every binary's seconds for the next run's order.
cut -f1,2 "$work/results" | sort -u >"$work/history.new"
mv "$work/history.new" "$history"

failed="$(awk -F'\t' '$3 != 0 { print $1 }' "$work/results")"
[ -z "$failed" ] || die "test binaries failed: $(tr '\n' ';' <<<"$failed")"
[ "$doc_status" = 0 ] || die "doc tests failed"
log "$(wc -l <"$work/results") test binaries and the doc tests passed"
