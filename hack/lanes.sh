#!/usr/bin/env bash
# Runs steps in lanes side by side and times each step (hack/setup.sh's
# two lanes). Source it; do not run it.
#
# A lane is a name and steps run one after another, each "label=command"
# (the command is eval'ed). Every output line carries its lane's name; a
# failing step stops its lane, the other lanes finish. Each step's seconds
# and exit status go to a file per lane, which lane_report prints.

# lane_run DIR NAME STEP...: run one lane, recording into DIR/NAME.
lane_run() {
  local dir="$1" name="$2" step label start rc
  shift 2
  : >"$dir/$name"
  for step in "$@"; do
    label="${step%%=*}"
    start=$(date +%s)
    rc=0
    eval "${step#*=}" 2>&1 | sed -u "s/^/[$name] /" || rc=$?
    echo "$label $(( $(date +%s) - start )) $rc" >>"$dir/$name"
    [ "$rc" = 0 ] || { echo "[$name] $label failed" >&2; return "$rc"; }
  done
}

# lane_report DIR NAME...: print each lane's steps, seconds and failures.
lane_report() {
  local dir="$1" name label secs rc
  shift
  for name in "$@"; do
    [ -f "$dir/$name" ] || continue
    while read -r label secs rc; do
      log "  $(printf '%-8s %-20s %5s s' "$name" "$label" "$secs")$([ "$rc" = 0 ] || echo "  FAILED")"
    done <"$dir/$name"
  done
}

# lane_start DIR NAME STEP...: run a lane in the background (lanes_wait
# waits for it).
LANE_PIDS=()
lane_start() {
  lane_run "$@" &
  LANE_PIDS+=($!)
}

# lanes_wait: wait for every started lane; fails when one lane failed.
lanes_wait() {
  local pid rc=0
  for pid in "${LANE_PIDS[@]}"; do wait "$pid" || rc=1; done
  LANE_PIDS=()
  return "$rc"
}
