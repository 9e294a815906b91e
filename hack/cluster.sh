#!/usr/bin/env bash
# A local four-node Kubernetes cluster for rackcache's e2e suite (test/e2e),
# every part real and on loopback:
#   - a one-node Ceph (hack/ceph.sh) on 127.0.0.1;
#   - etcd, kube-apiserver, kube-controller-manager and kube-scheduler on
#     127.0.0.1 (built from source: hack/cluster/assets.sh);
#   - the cache-server nodes "rackcache-host" and "rackcache-host2" and the
#     control node "rackcache-control" (the operator, the CSI controller):
#     containerd + runc (through a wrapper for this sandbox's OOM-score
#     limit) and a kubelet each on the host, the second and third in a
#     mount namespace of their own (hack/cluster/mntns.sh), each with its
#     own address;
#   - the compute node "rackcache-guest": a kubelet with its own containerd
#     inside the qemu guest (hack/cluster/guest-build.sh), the only kernel
#     here that can `nvme connect`;
#   - the product's images (hack/images.sh), imported into both containerds;
#   - Prometheus (Debian's) scraping rackcache's pods with the chart's alerts;
#   - external-snapshotter's CRDs and snapshot-controller.
#
# Usage:
#   hack/cluster.sh up [--dir DIR]     start (or re-check) the cluster; prints
#                                      `source DIR/env` (KUBECONFIG, Ceph, the
#                                      e2e suite's inputs)
#   hack/cluster.sh env [--dir DIR]    re-print those assignments
#   hack/cluster.sh down [--dir DIR]   stop every process by PID, unmount and
#                                      remove what `up` made
#   hack/cluster.sh node-stop NODE [--dir DIR]
#                                      a cache-server node's power cut: its
#                                      kubelet, containerd and containers get
#                                      SIGKILL (the e2e node-loss spec)
#   hack/cluster.sh node-start NODE [--dir DIR]
#                                      bring a stopped node back
#   DIR defaults to $RACKCACHE_CLUSTER_DIR or _output/cluster in the clone.
#
# Networking without a pod network: rackcache's pods use the host network
# (the chart's hostNetwork values), clients reach the apiserver at
# 127.0.0.1:6443 on both nodes (the guest forwards it to the host), and the
# guest reaches the cache server's NVMe/TCP port at 10.0.3.100 (qemu's
# guestfwd; the CSI node plugin's --portal-map rewrites the portal), the
# second cache server's at 10.0.3.100:$NVME2_GUEST_PORT. Other
# pods get a veth to their node (CNI ptp) and no route beyond it.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
source "$REPO_ROOT/hack/cluster/pki.sh"
source "$REPO_ROOT/hack/cluster/configs.sh"
source "$REPO_ROOT/hack/cluster/nodes.sh"
source "$REPO_ROOT/hack/cluster/mntns.sh"
source "$REPO_ROOT/hack/cluster/prometheus.sh"

HOST_NODE=rackcache-host
HOST2_NODE=rackcache-host2
CONTROL_NODE=rackcache-control
GUEST_NODE=rackcache-guest
# Loopback ports of the cluster's parts (the Ceph monitor: CEPH_PORT..+40).
ETCD_PORT=23790
APISERVER_PORT=6443
CEPH_PORT=13500
NVME_PORT=4420
# The guest's port for the second cache server's NVMe/TCP port.
NVME2_GUEST_PORT=4422
GUEST_KUBELET_PORT=20250
# The cache server's device: a sparse file on the host node.
CACHE_DEVICE_SIZE=1Gi
# What the e2e suite's pods run (hack/images.sh builds it from busybox).
WORKLOAD_IMAGE=rackcache.local/busybox:1.35
# The cluster's network namespace: every process of the cluster runs in it,
# so the host node's address (NODE_IP: a kubelet refuses loopback node
# IPs) exists only there. The
# host reaches the apiserver through a bridge on its own 127.0.0.1.
NETNS=rackcache-cluster
NODE_IP=10.0.4.1
NODE2_IP=10.0.4.2
NODE3_IP=10.0.4.3

cmd="${1:-}"; shift || true
dir="${RACKCACHE_CLUSTER_DIR:-$REPO_ROOT/_output/cluster}"
node_arg=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="${2:?--dir needs a value}"; shift 2 ;;
    -*) die "unknown option: $1 (see --help)" ;;
    *) [ -z "$node_arg" ] || die "one node at a time: $node_arg, $1"; node_arg="$1"; shift ;;
  esac
done

# start NAME CMD...: run CMD in a session of its own, logging to
# logs/NAME.log; pids/NAME.pid keeps its PID and start time (so that a PID
# reused by another process after a reboot or crash is never signalled).
# Nothing happens when it already runs.
start() {
  local name="$1"; shift
  if running "$name"; then return 0; fi
  mkdir -p "$dir/logs" "$dir/pids"
  setsid nsenter --net="/run/netns/$NETNS" "$@" >>"$dir/logs/$name.log" 2>&1 </dev/null &
  record_pid "$name" $!
}

record_pid() { echo "$2 $(start_time "$2")" >"$dir/pids/$1.pid"; }

# start_time PID: the process's start time in clock ticks since boot.
start_time() { awk '{ sub(/.*\) /, ""); print $20 }' "/proc/$1/stat" 2>/dev/null; }

# pid_of NAME: the recorded PID when that process still runs (same start
# time); nothing otherwise.
pid_of() {
  local f="$dir/pids/$1.pid" pid started
  [ -f "$f" ] || return 1
  read -r pid started <"$f"
  [ -n "$pid" ] && [ "$(start_time "$pid")" = "$started" ] && echo "$pid"
}

running() { pid_of "$1" >/dev/null; }

# stop NAME [SIGNAL]: SIGNAL (TERM; KILL for a crash), then KILL after
# 10 s, by the PID `start` recorded.
stop() {
  local pid i=0
  if pid="$(pid_of "$1")"; then
    kill "-${2:-TERM}" "$pid" 2>/dev/null || true
    while running "$1" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    if running "$1"; then kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$dir/pids/$1.pid"
}

# wait_for WHAT SECONDS CMD...: retry CMD every second until it succeeds.
# On giving up, the tail of every log goes to stderr first: the teardown
# that follows removes $dir, and a CI run keeps only its output.
wait_for() {
  local what="$1" limit="$2" i=0; shift 2
  until "$@" >/dev/null 2>&1; do
    if [ $i -ge "$limit" ]; then
      tail_logs >&2
      die "$what not ready after $limit s (logs: $dir/logs)"
    fi
    sleep 1; i=$((i + 1))
  done
}

# The last lines of each of the cluster's logs (the guest's console too).
tail_logs() {
  local f
  for f in "$dir"/logs/*.log; do
    [ -f "$f" ] || continue
    printf '%s\n' "--- last 15 lines of $f"
    tail -n 15 "$f"
  done
}

# One local cluster per machine: its namespace, ports and the node state
# under /var/lib are shared names. OWNER names the directory of the cluster
# that holds them; `up` refuses to start a second one and `down` of another
# directory leaves them alone.
OWNER=/run/rackcache-cluster.owner

# claim: take the machine's cluster names for $dir, or die naming who has them.
claim() {
  local owner
  owner="$(cat "$OWNER" 2>/dev/null || true)"
  if [ -n "$owner" ] && [ "$owner" != "$dir" ] && [ -d "$owner" ]; then
    die "another local cluster runs from $owner: stop it first (hack/cluster.sh down --dir $owner)"
  fi
  echo "$dir" >"$OWNER"
}

# owned: whether $dir holds the machine's cluster names.
owned() { [ "$(cat "$OWNER" 2>/dev/null || true)" = "$dir" ]; }

in_ns() { nsenter --net="/run/netns/$NETNS" "$@"; }

# netns_up: the namespace with its loopback interface carrying the node's
# address too (no dummy or veth driver in this kernel); no route leads out.
netns_up() {
  if [ ! -e "/run/netns/$NETNS" ]; then
    mountpoint -q /run/netns 2>/dev/null || touch "$dir/netns-mount-created"
    ip netns add "$NETNS"
  fi
  ip -n "$NETNS" link set lo up
  ip -n "$NETNS" addr replace "$NODE_IP/32" dev lo
  ip -n "$NETNS" addr replace "$NODE2_IP/32" dev lo
  ip -n "$NETNS" addr replace "$NODE3_IP/32" dev lo
  # kubectl, helm and the e2e suite on the host reach the apiserver at the
  # host's 127.0.0.1:APISERVER_PORT.
  bridge apiserver-bridge "$APISERVER_PORT"
}

# bridge NAME PORT [NS_PORT]: the host's 127.0.0.1:PORT reaches the
# namespace's 127.0.0.1:NS_PORT (default PORT), one socat per connection.
bridge() {
  local name="$1" host_port="$2" port="${3:-$2}"
  running "$name" && return 0
  mkdir -p "$dir/logs" "$dir/pids"
  setsid socat "TCP-LISTEN:$host_port,bind=127.0.0.1,fork,reuseaddr" \
    "EXEC:nsenter --net=/run/netns/$NETNS socat STDIO TCP\:127.0.0.1\:$port" \
    >>"$dir/logs/$name.log" 2>&1 </dev/null &
  record_pid "$name" $!
}

# netns_down: delete the namespace once no process is left in it (a
# leftover would live on in a namespace nobody can name), and the /run/netns
# mount `ip netns add` made when it was the first.
netns_down() {
  [ -e "/run/netns/$NETNS" ] || return 0
  local ns p left=()
  ns="$(stat -L -c %i "/run/netns/$NETNS")"
  for p in /proc/[0-9]*; do
    [ "$(stat -L -c %i "$p/ns/net" 2>/dev/null)" = "$ns" ] && left+=("${p#/proc/}")
  done
  [ ${#left[@]} -eq 0 ] || die "processes still in namespace $NETNS: ${left[*]} (not deleting it)"
  ip netns del "$NETNS"
  if [ -f "$dir/netns-mount-created" ] && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
    umount /run/netns 2>/dev/null || true
    rmdir /run/netns 2>/dev/null || true
  fi
}

kubectl_() { "$REPO_ROOT/bin/kubectl" --kubeconfig "$dir/kubeconfig" "$@"; }

control_plane_up() {
  local assets="$1" p="$dir/pki"
  start etcd "$assets/etcd" --data-dir "$dir/etcd" --name local \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls http://127.0.0.1:$((ETCD_PORT + 10)) --initial-advertise-peer-urls http://127.0.0.1:$((ETCD_PORT + 10)) \
    --initial-cluster "local=http://127.0.0.1:$((ETCD_PORT + 10))" --unsafe-no-fsync
  config_egress "$dir/egress.sock" >"$dir/egress.yaml"
  start egress "$dir/bin/egress" --socket "$dir/egress.sock" \
    --map "10.0.3.15:10250=127.0.0.1:$GUEST_KUBELET_PORT" --direct "$NODE_IP" --direct "$NODE2_IP" --direct "$NODE3_IP"
  start kube-apiserver "$assets/kube-apiserver" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
    --secure-port "$APISERVER_PORT" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" --client-ca-file "$p/ca.crt" \
    --token-auth-file "$p/tokens.csv" --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction \
    --service-cluster-ip-range 10.96.0.0/24 \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$p/sa.pub" \
    --service-account-signing-key-file "$p/sa.key" \
    --kubelet-client-certificate "$p/apiserver-kubelet-client.crt" --kubelet-client-key "$p/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP --egress-selector-config-file "$dir/egress.yaml" \
    --allow-privileged
  wait_for kube-apiserver 60 kubectl_ get --raw /readyz
  start kube-controller-manager "$assets/kube-controller-manager" --kubeconfig "$p/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
    --cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key" \
    --controllers '*,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller'
  start kube-scheduler "$assets/kube-scheduler" --kubeconfig "$p/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --leader-elect=false
}

print_env() {
  echo "export KUBECONFIG=$dir/kubeconfig"
  sed 's/^/export /' "$dir/ceph.env"
  echo "export RACKCACHE_CLUSTER_DIR=$dir"
  echo "export RACKCACHE_CLUSTER_NETNS=$NETNS"
  echo "export RACKCACHE_CLUSTER_NODE_IP=$NODE_IP"
  echo "export RACKCACHE_CLUSTER_NVME_PORT=$NVME_PORT"
  # The e2e suite's inputs (test/e2e/framework/config.go).
  echo "export RACKCACHE_E2E_CACHE_DEVICE=$dir/host/cache0.img"
  echo "export RACKCACHE_E2E_CACHE_DEVICE_SIZE=$CACHE_DEVICE_SIZE"
  echo "export RACKCACHE_E2E_WORKLOAD_IMAGE=$WORKLOAD_IMAGE"
  echo "export RACKCACHE_E2E_PROMETHEUS_URL=http://127.0.0.1:$PROMETHEUS_HOST_PORT"
  echo "export RACKCACHE_E2E_PROMETHEUS_TOKEN_FILE=$dir/prometheus/dataplane-token"
  echo "export RACKCACHE_E2E_PROMETHEUS_OPERATOR_TOKEN_FILE=$dir/prometheus/operator-token"
  # The node-loss spec's power cut and return of a cache-server node.
  echo "export RACKCACHE_E2E_NODE_STOP='$REPO_ROOT/hack/cluster.sh node-stop --dir $dir'"
  echo "export RACKCACHE_E2E_NODE_START='$REPO_ROOT/hack/cluster.sh node-start --dir $dir'"
}

up() {
  [ "$(id -u)" -eq 0 ] || die "the local cluster needs root (containerd, kubelet, qemu's disks)"
  mkdir -p "$dir/bin"
  claim
  hack/deps.sh go-tools >/dev/null
  local assets images guest
  assets="$("$REPO_ROOT/hack/cluster/assets.sh")"
  # RACKCACHE_CLUSTER_IMAGES: a directory of image tarballs and images.txt
  # to use instead of hack/images.sh's.
  images="${RACKCACHE_CLUSTER_IMAGES:-$("$REPO_ROOT/hack/images.sh" --print-dir)}"
  guest="$("$REPO_ROOT/hack/cluster/guest-build.sh" "$assets/kubelet")"
  go build -o "$dir/bin/egress" "$REPO_ROOT/hack/cluster/egress"
  # `node-start` starts a kubelet again without looking the assets up.
  ln -sf "$assets/kubelet" "$dir/bin/kubelet"

  log "Ceph on 127.0.0.1:$CEPH_PORT"
  netns_up
  (umask 077 && in_ns "$REPO_ROOT/hack/ceph.sh" up "$dir/ceph" --mon-port "$CEPH_PORT" >"$dir/ceph.env")
  pki_make
  log "control plane on 127.0.0.1:$APISERVER_PORT"
  control_plane_up "$assets"
  log "node $HOST_NODE (host): containerd, kubelet"
  host_node_up "$images"
  log "node $HOST2_NODE (host, its own mount namespace): containerd, kubelet"
  mntns_node_up 2 "$images" 10.88.3.0/24
  log "node $CONTROL_NODE (host, its own mount namespace): containerd, kubelet"
  mntns_node_up 3 "$images" 10.88.4.0/24
  log "node $GUEST_NODE (qemu guest): containerd, kubelet"
  guest_node_up "$guest" "$images"
  wait_for "node $HOST_NODE" 120 kubectl_ wait --for=condition=Ready "node/$HOST_NODE" --timeout=1s
  wait_for "node $HOST2_NODE" 120 kubectl_ wait --for=condition=Ready "node/$HOST2_NODE" --timeout=1s
  wait_for "node $CONTROL_NODE" 120 kubectl_ wait --for=condition=Ready "node/$CONTROL_NODE" --timeout=1s
  wait_for "node $GUEST_NODE" 240 kubectl_ wait --for=condition=Ready "node/$GUEST_NODE" --timeout=1s
  log "Prometheus, reached at 127.0.0.1:$PROMETHEUS_HOST_PORT"
  prometheus_up
  log "snapshot CRDs and snapshot-controller"
  kubectl_ apply -f "$images/snapshot-crds" >/dev/null
  kubectl_ apply -f "$REPO_ROOT/hack/cluster/snapshot-controller.yaml" >/dev/null
  log "cluster up: $(kubectl_ get nodes --no-headers | awk '{print $1 "=" $2}' | tr '\n' ' ')"
  # It carries the Ceph user's key: readable by root only.
  (umask 077 && print_env >"$dir/env")
  # The settings carry the Ceph user's key: say where they are, not what.
  echo "source $dir/env"
}

down() {
  [ -d "$dir" ] || { log "nothing to stop in $dir"; return 0; }
  guest_node_down
  # The node's shared state (kubelet and dataplane directories, cgroups) is
  # only touched when this directory's cluster made it.
  if owned; then
    mntns_node_down 3
    mntns_node_down 2
    host_node_down
  else
    local n
    for n in "" -host2 -host3; do stop "kubelet$n"; stop "containerd$n"; done
  fi
  local name
  for name in prometheus-bridge prometheus kube-scheduler kube-controller-manager kube-apiserver egress etcd apiserver-bridge; do
    stop "$name"
  done
  if [ -e "/run/netns/$NETNS" ]; then
    in_ns "$REPO_ROOT/hack/ceph.sh" down "$dir/ceph" >/dev/null || log "warning: hack/ceph.sh down failed"
  fi
  if owned; then
    netns_down
    rm -f "$OWNER"
  fi
  rm -rf "$dir"
  log "cluster down"
}

# node_stop / node_start: the node-loss spec's power cut and return.
node_stop() {
  [ -n "$node_arg" ] || die "node-stop: which node? ($HOST_NODE or $HOST2_NODE)"
  owned || die "no cluster of $dir runs here"
  server_node_kill "$(server_node_of "$node_arg")"
  log "node $node_arg stopped (SIGKILL of its kubelet, containerd and containers)"
}

node_start() {
  [ -n "$node_arg" ] || die "node-start: which node? ($HOST_NODE or $HOST2_NODE)"
  owned || die "no cluster of $dir runs here"
  server_node_start "$(server_node_of "$node_arg")"
  wait_for "node $node_arg" 120 kubectl_ wait --for=condition=Ready "node/$node_arg" --timeout=1s
  log "node $node_arg started"
}

case "$cmd" in
  --help|-h|help) usage ;;
  up) up ;;
  node-stop) node_stop ;;
  node-start) node_start ;;
  env) print_env ;;
  down) down ;;
  "") usage; exit 2 ;;
  *) die "unknown command: $cmd (see --help)" ;;
esac
