#!/usr/bin/env bash
# Runs the two things that have hung before, again and again, and counts
# what happened: bare boots of the test guest (hack/guest/run.sh with a
# trivial job), or whole `make demo` runs (up, then down). It stops at the
# first failure unless --keep-going, and keeps each failed run's console
# (or demo log) under _output/soak-boot/.
#
# Usage: hack/soak-boot.sh guest|demo [COUNT] [--keep-going] [--help]
#   COUNT          how many runs (default 30)
#   --keep-going   run all COUNT even after a failure
#
# Prints one line per run (number, outcome, seconds, boot attempts a hung
# boot took) and a summary line "N passed, N failed". Exit status 1 when
# any run failed.
source "$(dirname "$0")/lib.sh"

what="" count=30 keep_going=0
while [ $# -gt 0 ]; do
  case "$1" in
    --help|-h) usage; exit 0 ;;
    --keep-going) keep_going=1; shift ;;
    guest|demo) what="$1"; shift ;;
    *) [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -gt 0 ] || die "unknown argument: $1 (see --help)"
       count="$1"; shift ;;
  esac
done
[ -n "$what" ] || die "say what to run: guest or demo (see --help)"

out="$REPO_ROOT/_output/soak-boot"
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
printf 'echo soak-boot job ran\n' >"$tmp/job.sh"

# one_run N: runs one guest boot or one demo; its log goes to $tmp/log.
one_run() {
  case "$what" in
    guest)
      "$REPO_ROOT/hack/guest/run.sh" --script "$tmp/job.sh" --quiet --timeout 300 \
        --log "$tmp/console" >"$tmp/log" 2>&1
      ;;
    demo)
      local rc=0
      "$REPO_ROOT/hack/demo.sh" up >"$tmp/log" 2>&1 </dev/null || rc=$?
      # demo.sh down removes the demo's folder: keep the guest's logs first.
      local d="${RACKCACHE_DEMO_DIR:-$REPO_ROOT/_output/demo}"
      cat "$d/guest-run.log" >>"$tmp/log" 2>/dev/null || true
      cp "$d/guest-console.log" "$tmp/console" 2>/dev/null || true
      "$REPO_ROOT/hack/demo.sh" down >>"$tmp/log" 2>&1 </dev/null || true
      return "$rc"
      ;;
  esac
}

passed=0 failed=0
for i in $(seq 1 "$count"); do
  rm -f "$tmp"/console*
  t0=$SECONDS rc=0
  one_run || rc=$?
  hangs=$(grep -c 'hung: the console was silent' "$tmp/log" || true)
  if [ "$rc" = 0 ]; then
    passed=$((passed + 1))
    printf 'run %d/%d: ok in %d s (hung boots retried: %d)\n' "$i" "$count" $((SECONDS - t0)) "$hangs"
  else
    failed=$((failed + 1))
    cp "$tmp/log" "$out/run-$i.log"
    for f in "$tmp"/console*; do [ -e "$f" ] && cp "$f" "$out/run-$i.$(basename "$f")"; done
    printf 'run %d/%d: FAILED (status %d) in %d s (hung boots retried: %d); log: %s\n' \
      "$i" "$count" "$rc" $((SECONDS - t0)) "$hangs" "$out/run-$i.log"
    [ "$keep_going" = 1 ] || break
  fi
done
printf '%d passed, %d failed\n' "$passed" "$failed"
[ "$failed" = 0 ]
