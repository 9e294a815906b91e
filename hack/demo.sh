#!/usr/bin/env bash
# `make demo`: the product's main job through the operator, on this machine.
#
# What it shows, each part real:
#   1. the cloud block storage: a one-node Ceph on 127.0.0.1 (cephx on); two
#      RBD images holding the same data, written by the restricted CSI user,
#      who is refused outside its pool;
#   2. a control plane: a kube-apiserver and etcd (envtest's, built from
#      source), the CRDs applied with bin/kubectl, rackcache-operator running
#      against it;
#   3. a cache server: a Node in rack-a and a CachePool (explicit monitors, a
#      Secret with the Ceph user, a file as its cache device); the operator
#      makes the dataplane's DaemonSet, token, TLS certificates and
#      ConfigMap; with no kubelet here, hack/demokube stands in for one and
#      runs the DaemonSet's pod as a local rackcache-dataplane process with
#      those Secrets and that ConfigMap as its files, and reports it Ready;
#      the pool turns Ready with the capacity the operator read over TLS;
#   4. two CachedVolumes the operator places on that server: the first image
#      cached (write-back, adaptive), the second pass-through (the uncached
#      baseline), each its own NVMe/TCP subsystem allowing only the guest;
#   5. the compute node: a qemu guest with Debian's stock kernel connects to
#      the address, port and NQN of each volume's status, reads a hot set
#      from both; the demo prints the read hit ratio, the four I/O volumes
#      and the speedup over raw RBD;
#   6. a warm restart: kill -9 of the dataplane pod's process right after a
#      write-back write; the kubelet restarts it, it restores its persisted
#      configuration (the cache is attached, not reformatted), the guest's
#      kernel reconnects; what the guest wrote before the kill reads back;
#   7. the CSI driver: rackcache-csi's controller creates a volume from
#      StorageClass parameters in the guest's rack; in the guest the node
#      plugin stages and publishes it (nvme connect, mkfs, mount) and an
#      application writes a file and reads it back; the demo prints the
#      volume's read hit ratio on its cache server;
#   and `kubectl get cachepools,cachedvolumes` (also -o wide) at the end.
# Everything stays up afterwards; `make demo-down` stops it all by PID.
#
# Usage: hack/demo.sh up|down|status [--help]
#   RACKCACHE_DEMO_DIR        where the demo keeps its state (default: _output/demo)
#   RACKCACHE_DEMO_PORT       Ceph monitor port (default: 13300)
#   RACKCACHE_DEMO_NVMF_PORT  the pool's NVMe/TCP port (default: 14420)
#   RACKCACHE_DEMO_OPERATOR_PORT  the operator's metrics port; probes on the
#                             next one (default: 18080)
#   RACKCACHE_DEMO_STEP_PORT  where the guest waits for the host (default: 14480)
#   RACKCACHE_DEMO_CSI_PORT   the CSI controller's gRPC port; its /healthz on
#                             the next one (default: 19000)
#   RACKCACHE_DEMO_PROFILE    cargo profile of the dataplane: release (default) or debug
#   RACKCACHE_DATAPLANE_BIN   a prebuilt rackcache-dataplane to run instead (no cargo build)
# The dataplane serves JSON-RPC on 127.0.0.1:5260 and metrics on
# 127.0.0.1:9560 (the ports the operator's DaemonSet sets).
source "$(dirname "$0")/lib.sh"


demo_dir="${RACKCACHE_DEMO_DIR:-$REPO_ROOT/_output/demo}"
mon_port="${RACKCACHE_DEMO_PORT:-13300}"
nvmf_port="${RACKCACHE_DEMO_NVMF_PORT:-14420}"
operator_port="${RACKCACHE_DEMO_OPERATOR_PORT:-18080}"
step_port="${RACKCACHE_DEMO_STEP_PORT:-14480}"
profile="${RACKCACHE_DEMO_PROFILE:-release}"
ceph_dir="$demo_dir/ceph"
# The dataplane pod's JSON-RPC socket (found once the pod runs).
rpc_sock=""
img=demo-volume
raw_img=demo-raw
dp_bin="${RACKCACHE_DATAPLANE_BIN:-$REPO_ROOT/dataplane/target/$profile/rackcache-dataplane}"
cache_file="$demo_dir/cache.img"
# Sizes: Ceph holds data_mib MiB of data in each image; the guest reads a
# hot_mib MiB hot set passes times per timing; the cached volume has
# cache_mib MiB of the cache_file_mib MiB cache device.
data_mib=32 hot_mib=8 passes=3 cache_mib=128 cache_file_mib=256
# The guest reaches the dataplane at this address through guestfwd.
guest_target=10.0.3.100
guest_port=4420

say() { printf '\n\033[1;32m==> %s\033[0m\n' "$*"; }

source "$REPO_ROOT/hack/demo/cluster.sh"
source "$REPO_ROOT/hack/demo/guest.sh"
source "$REPO_ROOT/hack/demo/csi.sh"

ceph_step() {
  say "1/7 Ceph: one monitor, one manager, one bluestore OSD on 127.0.0.1:$mon_port"
  local started=$SECONDS
  # hack/ceph.sh prints plain NAME=value lines (no spaces in the values).
  eval "$("$REPO_ROOT/hack/ceph.sh" up "$ceph_dir" --mon-port "$mon_port")"
  echo "    ready in $((SECONDS - started)) s; monitors $RACKCACHE_CEPH_MON_HOST"

  # The restricted user's key goes into a keyring file (0600), never onto a
  # command line where `ps` would show it.
  local keyring="$demo_dir/client.$RACKCACHE_CEPH_USER.keyring"
  umask 077
  printf '[client.%s]\n\tkey = %s\n' "$RACKCACHE_CEPH_USER" "$RACKCACHE_CEPH_KEY" >"$keyring"
  # The key alone, for the CachePool's Secret (kubectl --from-file).
  printf '%s' "$RACKCACHE_CEPH_KEY" >"$demo_dir/ceph-user.key"
  local rbd_user=(rbd --conf /dev/null --mon-host "$RACKCACHE_CEPH_MON_HOST"
    --id "$RACKCACHE_CEPH_USER" --keyring "$keyring")

  local data="$demo_dir/pattern.bin" back="$demo_dir/readback.bin" i
  head -c $((data_mib << 20)) /dev/urandom >"$data"
  # A second `make demo` finds the images from the first one: start afresh.
  for i in "$img" "$raw_img"; do
    "${rbd_user[@]}" rm --no-progress "$RACKCACHE_CEPH_POOL/$i" >/dev/null 2>&1 || true
    "${rbd_user[@]}" import --no-progress "$data" "$RACKCACHE_CEPH_POOL/$i" >/dev/null
    "${rbd_user[@]}" resize --no-progress --size 256M "$RACKCACHE_CEPH_POOL/$i" >/dev/null
  done
  rm -f "$back"
  "${rbd_user[@]}" export --no-progress "$RACKCACHE_CEPH_POOL/$img" "$back" >/dev/null
  if cmp -s "$data" <(head -c $((data_mib << 20)) "$back"); then
    echo "    client.$RACKCACHE_CEPH_USER wrote rbd/$img and rbd/$raw_img (256 MiB each, the same $data_mib MiB of data) and read it back identical"
  else
    die "RBD data read back differs from what was written"
  fi
  rm -f "$back"
  # A second pool that the restricted user has no caps for.
  ceph --conf "$CEPH_CONF" osd pool create demo-other 8 8 >/dev/null 2>&1
  rbd --conf "$CEPH_CONF" pool init demo-other
  if "${rbd_user[@]}" create --size 1M "demo-other/x" >/dev/null 2>&1; then
    die "the restricted user could create an image outside its pool"
  fi
  echo "    client.$RACKCACHE_CEPH_USER is refused outside pool '$RACKCACHE_CEPH_POOL' (cephx caps: profile rbd)"
}

# dp_call METHOD [JSON]: one JSON-RPC call through SPDK's Python client
# (spdk.rpc.client, the library under spdk-rpc, which has no commands for
# the bdev_adacache_* methods); prints the result as JSON.
dp_call() {
  "$REPO_ROOT/bin/venv/bin/python3" - "$rpc_sock" "$1" "${2:-}" <<'PY'
import json, sys
from spdk.rpc.client import JSONRPCClient, JSONRPCException
sock, method, params = sys.argv[1:4]
try:
    res = JSONRPCClient(sock, timeout=120).call(method, json.loads(params) if params else None)
except JSONRPCException as e:
    sys.exit(f"{method}: {e.message}")
print(json.dumps(res))
PY
}

up() {
  mkdir -p "$demo_dir"
  # What an earlier run left holds the images open (Ceph refuses to remove
  # an image with watchers): stop it before Ceph's step starts afresh.
  kube_stop
  ceph_step
  control_plane_step
  cache_server_step
  volumes_step
  guest_step
  csi_step
  kube_summary
  say "Done. Still running: Ceph, the apiserver, rackcache-operator, the CSI controller, the stand-in kubelet and its dataplane pod"
  cat <<MSG
    kubectl:    export KUBECONFIG=$kubeconfig
                bin/kubectl get cachepools,cachedvolumes -o wide
                bin/kubectl describe cachedvolume $img
                bin/kubectl -n $ns get daemonsets,pods,secrets,configmaps
    Operator:   $kube_dir/operator.log (JSON), curl -s http://$operator_metrics/metrics (plain HTTP here: --metrics-secure=false)
                dashboard: http://$operator_dashboard/dashboard/
    Dataplane:  bin/venv/bin/spdk-rpc -s $rpc_sock nvmf_get_subsystems
                curl -s -H "Authorization: Bearer \$(cat $(dirname "$(dirname "$rpc_sock")")/metrics-token/token)" http://127.0.0.1:9560/metrics
                (the metrics name volumes: the operator's scrape token, Secret rackcache-dataplane-metrics)
    Ceph:       export CEPH_CONF=$ceph_dir/ceph.conf; ceph -s; rbd ls
    Stop all:   make demo-down     (stops them by PID and removes $demo_dir)
MSG
}

down() {
  kube_stop
  if [ -d "$ceph_dir" ]; then "$REPO_ROOT/hack/ceph.sh" down "$ceph_dir"; fi
  rm -rf "$demo_dir"
  log "demo stopped"
}

status() {
  if [ -s "$kubeconfig" ] && kubectl get --raw /readyz >/dev/null 2>&1; then
    kubectl get cachepools,cachedvolumes -o wide
  else
    echo "no demo apiserver running"
  fi
  if [ -f "$ceph_dir/env" ]; then CEPH_CONF="$ceph_dir/ceph.conf" ceph -s; else echo "no demo Ceph running"; fi
}

if [ "${RACKCACHE_DEMO_ONLY:-}" = ceph ]; then mkdir -p "$demo_dir"; ceph_step; exit 0; fi
case "${1:-}" in
  --help|-h) usage ;;
  up) up ;;
  down) down ;;
  status) status ;;
  *) usage; exit 2 ;;
esac
