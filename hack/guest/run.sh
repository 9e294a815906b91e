#!/usr/bin/env bash
# Boots the qemu test guest (hack/guest/build.sh) under TCG software emulation,
# runs one job script in it, streams the serial console live, and exits with
# the job's exit status.
#
# Usage: hack/guest/run.sh --script FILE [options] [--help]
#   --script FILE          the job: runs as /job/run.sh (busybox sh, cwd /job)
#   --file SRC:DEST        copy a host file or directory to DEST in the guest
#                          (repeatable)
#   --bin PATH[:DEST]      copy a host binary and the shared libraries ldd
#                          finds for it (default DEST: /usr/local/bin/NAME;
#                          repeatable)
#   --guestfwd GPORT:[HADDR:]HPORT
#                          the guest's 10.0.3.100:GPORT reaches the host's
#                          HADDR:HPORT; HADDR is a loopback address
#                          (127.x.y.z, default 127.0.0.1) (repeatable)
#   --hostfwd HPORT:GPORT  the host's 127.0.0.1:HPORT reaches the guest's
#                          GPORT (repeatable)
#   --timeout SECONDS      kill the guest and fail after this long (default 300)
#   --boot-timeout SECONDS a guest whose console stays silent this long
#                          before its job starts is hung in boot: it is
#                          killed, reported, and booted again (default 120;
#                          a warning comes at half of it, 60 s by default;
#                          a normal boot is silent for 7-30 s, up to ~50 s
#                          on a loaded machine)
#   --boot-attempts N      how many boots a hung or panicking boot may take (default 3);
#                          only boots whose job never started are retried
#   --append ARGS          more kernel command-line words (e.g. for
#                          diagnosis: loglevel=8 earlyprintk=serial)
#   --mem MB               guest memory (default 1024)
#   --log FILE             also keep the console in FILE
#   --status-file FILE     write `exit=N` (the job's status) or `error=...`
#                          (the guest failed; the job's status is unknown) and
#                          `nonce=...` (the boot's marker nonce)
#   --pid-file FILE        where to keep qemu's PID (default: in a temp dir)
#   --quiet                do not copy the console to stdout
#
# The guest is 10.0.3.15/24 on qemu's user network with restrict=on: it
# reaches nothing but the guestfwd endpoints, and the host is never exposed
# beyond 127.0.0.1. Inside, the guest has busybox, nvme-cli, modprobe-able
# nvmet/nvmet-tcp/brd/ext4 and a fixed /etc/nvme/hostnqn.
#
# Exit status: the job's, or 124 after --timeout, or 125 when the guest did
# not run the job to its end (panic, missing marker, qemu error, every boot
# attempt hung).
source "$(dirname "$0")/../lib.sh"

nonce="" script="" timeout=300 mem=1024 log_file="" status_file="" pid_file="" quiet=0
boot_timeout=120 boot_attempts=3 extra_append=""
files=() bins=() guestfwds=() hostfwds=()

is_port() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le 65535 ]; }

while [ $# -gt 0 ]; do
  case "$1" in
    --help|-h) usage; exit 0 ;;
    --script) script="${2:?--script needs a FILE}"; shift 2 ;;
    --file) files+=("${2:?--file needs SRC:DEST}"); shift 2 ;;
    --bin) bins+=("${2:?--bin needs PATH[:DEST]}"); shift 2 ;;
    --guestfwd) guestfwds+=("${2:?--guestfwd needs GPORT:HPORT}"); shift 2 ;;
    --hostfwd) hostfwds+=("${2:?--hostfwd needs HPORT:GPORT}"); shift 2 ;;
    --timeout) timeout="${2:?--timeout needs SECONDS}"; shift 2 ;;
    --mem) mem="${2:?--mem needs MB}"; shift 2 ;;
    --boot-timeout) boot_timeout="${2:?--boot-timeout needs SECONDS}"; shift 2 ;;
    --boot-attempts) boot_attempts="${2:?--boot-attempts needs N}"; shift 2 ;;
    --append) extra_append="${2:?--append needs ARGS}"; shift 2 ;;
    --log) log_file="${2:?--log needs a FILE}"; shift 2 ;;
    --status-file) status_file="${2:?--status-file needs a FILE}"; shift 2 ;;
    --pid-file) pid_file="${2:?--pid-file needs a FILE}"; shift 2 ;;
    --quiet) quiet=1; shift ;;
    *) die "unknown option: $1 (see --help)" ;;
  esac
done
[ -n "$script" ] || die "--script FILE is required (see --help)"
[ -f "$script" ] || die "--script: no such file: $script"
[[ "$timeout" =~ ^[0-9]+$ ]] && [ "$timeout" -gt 0 ] || die "--timeout must be a positive number of seconds"
[[ "$mem" =~ ^[0-9]+$ ]] && [ "$mem" -ge 256 ] || die "--mem must be at least 256 (MB)"
[[ "$boot_timeout" =~ ^[0-9]+$ ]] && [ "$boot_timeout" -gt 0 ] || die "--boot-timeout must be a positive number of seconds"
[[ "$boot_attempts" =~ ^[0-9]+$ ]] && [ "$boot_attempts" -gt 0 ] || die "--boot-attempts must be a positive number"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found: run hack/deps.sh apt"
command -v socat >/dev/null || [ ${#guestfwds[@]} -eq 0 ] || die "socat not found: run hack/deps.sh apt"

guest="$REPO_ROOT/bin/guest"
[ -f "$guest/.complete" ] || die "no guest build at $guest: run hack/guest/build.sh"

tmp="$(mktemp -d)"
[ -n "$pid_file" ] || pid_file="$tmp/qemu.pid"
console="${log_file:-$tmp/console}"
qemu_pid="" tail_pid=""

# Stop what this run started, by PID only: qemu (TERM, then KILL after 5 s;
# the socat processes it spawned for guestfwd see their connection close and
# exit) and the console streamer.
cleanup() {
  if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
    kill -TERM "$qemu_pid" 2>/dev/null || true
    local i=0
    while kill -0 "$qemu_pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    kill -KILL "$qemu_pid" 2>/dev/null || true
  fi
  if [ -n "$tail_pid" ]; then kill "$tail_pid" 2>/dev/null || true; fi
  rm -f "$pid_file"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

write_status() {
  [ -n "$status_file" ] || return 0
  printf '%s\nnonce=%s\n' "$1" "$nonce" >"$status_file"
}

fail() { # fail STATUS MESSAGE
  write_status "error=$2"
  printf '[run.sh] error: %s\n' "$2" >&2
  exit "$1"
}

# --- the job archive: /job/run.sh, --file and --bin contents ---------------
stage="$tmp/stage"
mkdir -p "$stage/job"
install -m 0755 "$script" "$stage/job/run.sh"

guest_path() { # guest_path OPTION DEST: DEST as a path inside the stage
  [[ "$2" == /* ]] || die "$1: guest path must be absolute: $2"
  [[ "/$2/" != */../* ]] || die "$1: guest path must not contain ..: $2"
  printf '%s%s' "$stage" "$2"
}

for spec in "${files[@]}"; do
  [[ "$spec" == *:* ]] || die "--file needs SRC:DEST, got $spec"
  src="${spec%:*}" dest="$(guest_path --file "${spec##*:}")"
  [ -e "$src" ] || die "--file: no such file or directory: $src"
  mkdir -p "$(dirname "$dest")"
  cp -a "$src" "$dest"
done

for spec in "${bins[@]}"; do
  src="${spec%%:*}"
  if [[ "$spec" == *:* ]]; then dest="${spec#*:}"; else dest="/usr/local/bin/$(basename "$src")"; fi
  [ -f "$src" ] && [ -x "$src" ] || die "--bin: not an executable file: $src"
  install -D -m 0755 "$src" "$(guest_path --bin "$dest")"
  # ldd names each library (and the loader) by its path on the host; put
  # them at the same paths so the guest's loader finds them the same way. A
  # static binary has none ("not a dynamic executable"). Libraries the
  # guest image has (its glibc and loader, newer than this machine's) stay
  # the guest's: they run the host's binaries too, the reverse is not true.
  if libs="$(ldd "$src" 2>/dev/null)"; then
    while read -r lib; do
      [ -n "$lib" ] || continue
      [ -e "$lib" ] || die "--bin $src: library $lib not found on the host"
      grep -qxF "$lib" "$guest/files" 2>/dev/null && continue
      install -D -m 0755 "$(readlink -f "$lib")" "$stage$lib"
    done < <(awk '$2 == "=>" && $3 == "not" { print "/missing/" $1; next }
                 $2 == "=>" && $3 ~ /^\// { print $3; next }
                 $1 ~ /^\// { print $1 }' <<<"$libs")
  fi
done

# The kernel unpacks every archive concatenated to the initramfs in turn, so
# the job goes into a second, small archive after the cached one: no disk
# image and no rebuild of the base. -mindepth 1 keeps "." out, which would
# change the guest root's mode.
chmod 0755 "$stage"
(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort \
  | cpio --quiet -o -H newc -R 0:0) | gzip -1 >"$tmp/job.cpio.gz"
cat "$guest/initrd.gz" "$tmp/job.cpio.gz" >"$tmp/initrd.gz"

# --- network ----------------------------------------------------------------
# restrict=on isolates the guest: it reaches no host address and nothing
# beyond, only the guestfwd endpoints; hostfwd binds the host side to
# 127.0.0.1 only.
netdev="user,id=n1,net=10.0.3.0/24,host=10.0.3.2,dns=10.0.3.3,restrict=on"
for spec in "${guestfwds[@]}"; do
  gport="${spec%%:*}" hport="${spec##*:}" haddr=127.0.0.1
  # GPORT:HADDR:HPORT reaches another loopback address (servers of the
  # operator's suite listen on 127.0.0.2, 127.0.0.3, ...); never beyond it.
  [ "$gport:$hport" = "$spec" ] || haddr="${spec#*:}" haddr="${haddr%:*}"
  is_port "$gport" && is_port "$hport" || die "--guestfwd needs GPORT:[HADDR:]HPORT, got $spec"
  [[ "$haddr" =~ ^127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "--guestfwd: $haddr is not a loopback address (127.x.y.z)"
  # qemu spawns the command for each connection the guest opens.
  netdev+=",guestfwd=tcp:10.0.3.100:$gport-cmd:socat - TCP:$haddr:$hport"
done
for spec in "${hostfwds[@]}"; do
  hport="${spec%%:*}" gport="${spec#*:}"
  is_port "$gport" && is_port "$hport" || die "--hostfwd needs HPORT:GPORT, got $spec"
  netdev+=",hostfwd=tcp:127.0.0.1:$hport-10.0.3.15:$gport"
done

# --- boot ---------------------------------------------------------------------
# boot_once: starts qemu with a fresh nonce on the kernel command line
# (/init repeats it in its markers, so neither a stale console file nor job
# output that merely looks like a marker can be taken for this job's end)
# and streams the console.
boot_once() {
  nonce="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
  : >"$console"
  # TCG, not KVM: /dev/kvm on these machines is a software nested module that
  # stock kernels hang under. tb-size bounds TCG's translation cache (qemu's
  # RSS). The virtio NIC's option ROM is for network boot, which direct
  # kernel boot does not use (and the ipxe ROM package need not be
  # installed).
  qemu-system-x86_64 \
    -name "rackcache-guest-$nonce" \
    -nodefaults -no-user-config -display none -monitor none -no-reboot \
    -accel tcg,thread=multi,tb-size=256 -cpu "$GUEST_CPU" -smp 2 -m "$mem" \
    -kernel "$guest/vmlinuz" -initrd "$tmp/initrd.gz" \
    -append "console=ttyS0 rdinit=/init panic=-1 loglevel=4 mitigations=off rackcache.nonce=$nonce${extra_append:+ $extra_append}" \
    -chardev "file,id=con0,path=$console" -serial chardev:con0 \
    -netdev "$netdev" -device virtio-net-pci,netdev=n1,romfile= \
    -pidfile "$pid_file" \
    </dev/null &
  qemu_pid=$!
  if [ "$quiet" = 0 ]; then
    # Stream the console as qemu writes it; tail ends by itself once qemu
    # has exited and it has printed the rest.
    tail -n +1 -f -s 0.2 --pid="$qemu_pid" "$console" &
    tail_pid=$!
  fi
}

# stop_qemu: asks qemu to stop, and reaps it and the console streamer.
stop_qemu() {
  if kill -0 "$qemu_pid" 2>/dev/null; then
    kill -TERM "$qemu_pid" 2>/dev/null || true
  fi
  qemu_rc=0
  wait "$qemu_pid" || qemu_rc=$?
  qemu_pid=""
  if [ -n "$tail_pid" ]; then
    wait "$tail_pid" || true
    tail_pid=""
  fi
}

# watch: waits for this boot's end and sets `outcome`: done (qemu exited, or
# the job's marker was seen), timeout (--timeout), or boot-hang (the console
# stayed silent --boot-timeout seconds before the job started: the guest is
# stuck in its kernel's boot or in /init's set-up, and nothing of the job
# has run, so booting again is safe).
watch() {
  local exit_re="^RACKCACHE-GUEST-EXIT $nonce ([0-9]+)"$'\r'"?\$"
  local setup_re="^RACKCACHE-GUEST-SETUP-FAILED $nonce"
  local start_re="^RACKCACHE-GUEST-JOB-START $nonce"
  local marker_seen_at="" job_started=0 size=0 last_size=-1 quiet_since=$SECONDS warned=0
  outcome=done
  while kill -0 "$qemu_pid" 2>/dev/null; do
    if [ $((SECONDS - start)) -ge "$timeout" ]; then
      outcome=timeout
      return
    fi
    if [ "$job_started" = 0 ]; then
      if grep -qaE "$start_re" "$console"; then
        job_started=1
      else
        size=$(stat -c %s "$console" 2>/dev/null || echo 0)
        if [ "$size" != "$last_size" ]; then last_size=$size quiet_since=$SECONDS warned=0; fi
        if [ "$warned" = 0 ] && [ $((SECONDS - quiet_since)) -ge $((boot_timeout / 2)) ]; then
          printf '[run.sh] warning: boot %s: the console has been silent for %s s and the job has not started (a normal boot takes 7-30 s); killing the guest at %s s of silence\n' \
            "$attempt" $((SECONDS - quiet_since)) "$boot_timeout" >&2
          warned=1
        fi
        if [ $((SECONDS - quiet_since)) -ge "$boot_timeout" ]; then
          outcome=boot-hang
          return
        fi
      fi
    fi
    # After the marker the guest only powers off; if that hangs, the job's
    # result still stands.
    if [ -z "$marker_seen_at" ] && grep -qaE "$exit_re|$setup_re" "$console"; then
      marker_seen_at=$SECONDS
    fi
    if [ -n "$marker_seen_at" ] && [ $((SECONDS - marker_seen_at)) -ge 15 ]; then
      printf '[run.sh] warning: the guest did not power off 15 s after the job ended; killing it\n' >&2
      return
    fi
    sleep 0.5
  done
}

start=$SECONDS attempt=1
while :; do
  boot_once
  watch
  stop_qemu
  # A kernel panic before the job started is a boot that failed, like a
  # hung one: multi-threaded TCG can race the kernel's live code patching
  # while modules load (Oops in do_sync_core or an int3 in patched text).
  # Nothing of the job ran, so booting again is safe; a panic once the job
  # runs fails the run below.
  if [ "$outcome" = done ] && ! grep -qaE "^RACKCACHE-GUEST-JOB-START $nonce" "$console" \
    && grep -qa 'Kernel panic' "$console"; then
    outcome=boot-panic
  fi
  # qemu itself crashing (a signal we did not send: multi-threaded TCG in
  # qemu 7.2 segfaults now and then under load) before the job started is
  # a failed boot too; once the job runs it fails the run below.
  if [ "$outcome" = done ] && [ "$qemu_rc" -gt 128 ] \
    && ! grep -qaE "^RACKCACHE-GUEST-JOB-START $nonce" "$console"; then
    outcome=boot-crash
  fi
  [ "$outcome" = boot-hang ] || [ "$outcome" = boot-panic ] || [ "$outcome" = boot-crash ] || break
  last_line="$(tr -d '\r' <"$console" | grep -a . | tail -n 1 || true)"
  if [ "$outcome" = boot-crash ]; then
    printf '[run.sh] warning: boot %s of %s: qemu crashed (exit status %s) before the job started\n' \
      "$attempt" "$boot_attempts" "$qemu_rc" >&2
  elif [ "$outcome" = boot-panic ]; then
    printf '[run.sh] warning: boot %s of %s panicked before the job started: %s\n' \
      "$attempt" "$boot_attempts" "$(grep -a 'Kernel panic' "$console" | head -n 1 | tr -d '\r')" >&2
  else
    printf '[run.sh] warning: boot %s of %s hung: the console was silent for %s s before the job started (%s bytes written; last line: %s)\n' \
      "$attempt" "$boot_attempts" "$boot_timeout" "$(stat -c %s "$console")" "${last_line:-none}" >&2
  fi
  if [ -n "$log_file" ]; then cp "$console" "$log_file.hung-$attempt"; fi
  if [ "$attempt" -ge "$boot_attempts" ]; then
    fail 125 "the guest failed to boot $boot_attempts times in a row (hung: console silent for $boot_timeout s, a kernel panic or a qemu crash, before the job started${log_file:+; consoles: $log_file.hung-*})"
  fi
  attempt=$((attempt + 1))
done

elapsed=$((SECONDS - start))
exit_re="^RACKCACHE-GUEST-EXIT $nonce ([0-9]+)"$'\r'"?\$"
setup_re="^RACKCACHE-GUEST-SETUP-FAILED $nonce"
status_line="$(grep -aE "$exit_re" "$console" | tail -n 1 | tr -d '\r' || true)"
if [ -n "$status_line" ]; then
  status="${status_line##* }"
  write_status "exit=$status"
  printf '[run.sh] job exited with status %s after %s s\n' "$status" "$elapsed" >&2
  exit "$status"
fi
if [ "$outcome" = timeout ]; then
  fail 124 "timed out after $timeout s (console: ${log_file:-not kept, use --log})"
fi
if grep -qaE "$setup_re" "$console"; then
  fail 125 "the guest could not be set up: $(grep -a 'rackcache-guest: setup failed' "$console" | tail -n 1 | tr -d '\r')"
fi
if grep -qa 'Kernel panic' "$console"; then
  fail 125 "the guest kernel panicked: $(grep -a 'Kernel panic' "$console" | head -n 1 | tr -d '\r')"
fi
fail 125 "the guest stopped without reporting the job's status (qemu exit status $qemu_rc)"
