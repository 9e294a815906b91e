#!/usr/bin/env bash
# Kills an NVMe/TCP target under the test guest's kernel initiator again and
# again, and counts guest kernel crashes: the question whether Debian 12's
# 6.1 initiator crash (nvme_tcp_recv_skb / nvme_tcp_io_work, see
# docs/development.md) depends on the target, and whether 6.12 has it.
#
# Usage: hack/initiator-kills.sh TARGET KILLS [--help]
#   TARGET  ours (the dataplane's release build) or spdk (SPDK's nvmf_tgt:
#           set SPDK_DIR to a built SPDK tree, e.g. the speed bench's)
#   KILLS   how many kill -9 / restart cycles, one every 5 s
#
# The guest (bin/guest: RACKCACHE_GUEST_SUITE=bookworm hack/guest/build.sh
# for 6.1, plain hack/guest/build.sh for 6.12) connects with a 1 s
# reconnect delay and no loss timeout, then writes and reads 1 MiB with
# O_DIRECT in a loop while the target on the host is killed and restarted
# on the same port with the same malloc subsystem. Prints one line:
#   kernel=... target=... kills=N crashes=M
# A crash ends the guest early (run.sh stops it); the count is of guest
# boots that crashed (0 or 1 per run: run it again for more samples).
source "$(dirname "$0")/lib.sh"

case "${1:-}" in --help|-h|"") usage; exit 0 ;; esac
[ -x "$REPO_ROOT/bin/venv/bin/spdk-rpc" ] || die "no bin/venv/bin/spdk-rpc: run hack/deps.sh python"
target="$1" kills="${2:?KILLS needed (see --help)}"
[[ "$kills" =~ ^[0-9]+$ ]] || die "KILLS must be a number"
case "$target" in
  ours) bin="$REPO_ROOT/dataplane/target/release/rackcache-dataplane"
        [ -x "$bin" ] || die "no release build at $bin: cargo build --release -p rackcache-dataplane" ;;
  spdk) bin="${SPDK_DIR:?set SPDK_DIR to a built SPDK tree}/build/bin/nvmf_tgt"
        [ -x "$bin" ] || die "no $bin"
        export LD_LIBRARY_PATH="$SPDK_DIR/build/lib" ;;
  *) die "TARGET is ours or spdk" ;;
esac

NQN=nqn.2016-06.io.rackcache:kills
work="$(mktemp -d)"
sock="$work/rpc.sock" pid_file="$work/target.pid"
port=$(( 20000 + RANDOM % 5000 ))
cleanup() {
  [ -f "$pid_file" ] && kill -9 "$(cat "$pid_file")" 2>/dev/null || true
  [ -n "${guest_pid:-}" ] && kill "$guest_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# SPDK's stock command line drives both targets (the project's venv).
rpc() { "$REPO_ROOT/bin/venv/bin/spdk-rpc" -s "$sock" "$@" >/dev/null; }

start_target() {
  rm -f "$sock"
  if [ "$target" = spdk ]; then
    "$bin" -m 0x1 --no-pci -s 1024 -r "$sock" >>"$work/target.log" 2>&1 &
  else
    RACKCACHE_LOG=warn "$bin" --rpc-socket "$sock" >>"$work/target.log" 2>&1 &
  fi
  echo $! >"$pid_file"
  local i
  for i in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
  rpc nvmf_create_transport -t TCP
  rpc bdev_malloc_create -b Malloc0 64 4096
  rpc nvmf_create_subsystem "$NQN" -s KILLS -a
  rpc nvmf_subsystem_add_ns "$NQN" Malloc0
  rpc nvmf_subsystem_add_listener "$NQN" -t tcp -f ipv4 -a 127.0.0.1 -s "$port"
}

seconds=$(( kills * 5 + 40 ))
cat >"$work/job.sh" <<EOF
echo "kernel-release=\$(uname -r)"
nvme connect -t tcp -a 10.0.3.100 -s 4420 -n $NQN --reconnect-delay=1 --ctrl-loss-tmo=-1 || exit 1
for i in \$(seq 100); do [ -b /dev/nvme0n1 ] && break; sleep 0.1; done
end=\$(( \$(date +%s) + $seconds - 20 ))
while [ \$(date +%s) -lt \$end ]; do
  dd if=/dev/zero of=/dev/nvme0n1 bs=64k count=16 oflag=direct 2>/dev/null
  dd if=/dev/nvme0n1 of=/dev/null bs=64k count=16 iflag=direct 2>/dev/null
done
nvme disconnect -n $NQN >/dev/null 2>&1
echo guest-done
EOF

start_target
"$REPO_ROOT/hack/guest/run.sh" --script "$work/job.sh" --guestfwd "4420:$port" \
  --timeout "$seconds" --quiet --log "$work/console" --status-file "$work/status" &
guest_pid=$!
# Let the guest boot and connect before the first kill.
sleep 25
for _ in $(seq "$kills"); do
  kill -0 "$guest_pid" 2>/dev/null || break
  kill -9 "$(cat "$pid_file")"; wait "$(cat "$pid_file")" 2>/dev/null || true
  sleep 1
  start_target
  sleep 4
done
wait "$guest_pid" || true
kernel="$(grep -m1 -o 'kernel-release=[^ ]*' "$work/console" | cut -d= -f2 | tr -d '\r' || true)"
crashes=0
if grep -qE 'BUG: |Oops|general protection fault|Kernel panic' "$work/console"; then crashes=1; fi
reconnects="$(grep -c 'Successfully reconnected' "$work/console" || true)"
echo "kernel=$kernel target=$target kills=$kills reconnects=$reconnects crashes=$crashes"
if [ "$crashes" = 1 ]; then grep -m3 -E 'BUG: |RIP:|Call Trace' "$work/console" >&2; fi
