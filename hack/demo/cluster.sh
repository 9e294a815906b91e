# The demo's Kubernetes half, sourced by hack/demo.sh: a local control plane
# (envtest's etcd and kube-apiserver), the CRDs, rackcache-operator, a Node
# whose DaemonSet pods a stand-in kubelet runs as local processes (there is
# no real kubelet here), a CachePool and its CachedVolumes. Every object goes
# through bin/kubectl; the operator does the rest.

kube_dir="$demo_dir/kube"
kubeconfig="$kube_dir/kubeconfig"
kubelet_dir="$demo_dir/kubelet"
demokube="$demo_dir/bin/demokube"
ns=rackcache-system
node=demo-node-1
rack=rack-a
pool=demo
operator_metrics="127.0.0.1:$operator_port"
operator_probes="127.0.0.1:$((operator_port + 1))"
operator_dashboard="127.0.0.1:$((operator_port + 2))"
export KUBECONFIG="$kubeconfig"

kubectl() { "$REPO_ROOT/bin/kubectl" "$@"; }

# start_bg NAME CMD...: runs CMD in the background; its output goes to
# $kube_dir/NAME.log, its PID to $kube_dir/NAME.pid.
start_bg() {
  local name="$1"; shift
  "$@" >>"$kube_dir/$name.log" 2>&1 </dev/null &
  echo $! >"$kube_dir/$name.pid"
  disown
}

# stop_bg NAME WORD: stops what start_bg NAME started (SIGTERM, SIGKILL
# after 30 s), only while its PID still runs a command line holding WORD.
stop_bg() {
  local pidfile="$kube_dir/$1.pid" pid i=0
  pid="$(cat "$pidfile" 2>/dev/null)" || return 0
  if [ -n "$pid" ] && grep -qa "$2" "/proc/$pid/cmdline" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

# wait_until SECONDS WHAT CMD...: polls CMD until it succeeds; fails
# saying what it waited for after SECONDS.
wait_until() {
  local secs="$1" what="$2" i=0
  shift 2
  until "$@" >/dev/null 2>&1; do
    i=$((i + 1))
    if [ $i -ge $((secs * 5)) ]; then
      echo "timed out after $secs s waiting for $what" >&2
      return 1
    fi
    sleep 0.2
  done
}

# fail LOG...: ends the demo showing the last lines of each log.
fail() {
  local f
  for f in "$@"; do echo "---- last lines of $f:" >&2; tail -n 30 "$f" >&2 || true; done
  die "see the logs above (all under $demo_dir)"
}

control_plane_step() {
  say "2/7 a local control plane (etcd + kube-apiserver), the CRDs, rackcache-operator"
  mkdir -p "$kube_dir" "$demo_dir/bin"
  # `make demo` installs it first; hack/demo.sh run alone may not have.
  [ -x "$REPO_ROOT/bin/kubectl" ] || "$REPO_ROOT/hack/deps.sh" go-tools
  local assets
  assets="$("$REPO_ROOT/hack/envtest-assets.sh" --print-dir)"
  (cd "$REPO_ROOT" && go build -o "$demokube" ./hack/demokube && go build -o bin/rackcache-operator ./cmd/operator)
  rm -f "$kubeconfig"
  start_bg control-plane "$demokube" control-plane --dir "$kube_dir" --assets "$assets"
  wait_until 120 "the apiserver's kubeconfig" test -s "$kubeconfig" || fail "$kube_dir/control-plane.log"
  wait_until 60 "the apiserver to answer" kubectl get --raw /readyz || fail "$kube_dir/control-plane.log"
  kubectl apply --server-side -k "$REPO_ROOT/config/crd" | sed 's/^/    /'
  kubectl wait --for condition=Established --timeout=60s crd/cachepools.rackcache.io crd/cachedvolumes.rackcache.io >/dev/null
  kubectl apply --server-side -f "$REPO_ROOT/config/manager/namespace.yaml" | sed 's/^/    /'
  # The identities the servers' RPC authentication rests on: the operator
  # (admin here) mints tokens of its ServiceAccount, the servers review
  # them as theirs.
  kubectl apply --server-side -f "$REPO_ROOT/config/rbac/service_account.yaml" \
    -f "$REPO_ROOT/config/rbac/dataplane_service_account.yaml" | sed 's/^/    /'
  start_bg operator "$REPO_ROOT/bin/rackcache-operator" --kubeconfig "$kubeconfig" --namespace "$ns" \
    --metrics-bind-address "$operator_metrics" --metrics-secure=false --health-probe-bind-address "$operator_probes" \
    --dashboard-bind-address "$operator_dashboard" \
    --status-interval 5s --server-lost-grace 1m --dataplane-timeout 30s \
    --allowed-device-prefixes "/dev/disk/by-id/,/dev/nvme,$cache_file"
  wait_until 60 "rackcache-operator's /readyz" curl -sf "http://$operator_probes/readyz" || fail "$kube_dir/operator.log"
  echo "    apiserver $(kubectl config view -o jsonpath='{.clusters[0].cluster.server}') (kubeconfig $kubeconfig)"
  echo "    rackcache-operator pid $(cat "$kube_dir/operator.pid"), metrics http://$operator_metrics/metrics (plain HTTP on loopback), dashboard http://$operator_dashboard/dashboard/, log $kube_dir/operator.log"
}

cache_server_step() {
  say "3/7 a cache server: Node $node in $rack, CachePool $pool, the operator's dataplane DaemonSet run by a stand-in kubelet"
  if [ -z "${RACKCACHE_DATAPLANE_BIN:-}" ]; then
    (cd "$REPO_ROOT/dataplane" && cargo build --quiet $([ "$profile" = release ] && echo --release) -p rackcache-dataplane)
  fi
  rm -rf "$kubelet_dir" "$cache_file"
  truncate -s "${cache_file_mib}M" "$cache_file"
  start_bg kubelet "$demokube" kubelet --kubeconfig "$kubeconfig" --node "$node" --address 127.0.0.1 \
    --dir "$kubelet_dir" --dataplane "$dp_bin" \
    --label rackcache.io/cache-server=true --label "topology.rackcache.io/rack=$rack"
  wait_until 30 "Node $node" kubectl get node "$node" || fail "$kube_dir/kubelet.log"

  # The Ceph user's Secret: the key comes from a 0600 file, never from a
  # command line, and client-side dry-run keeps it off the terminal.
  kubectl -n "$ns" create secret generic ceph-rackcache --from-literal=userID="$RACKCACHE_CEPH_USER" \
    --from-file=userKey="$demo_dir/ceph-user.key" --dry-run=client -o yaml \
    | kubectl apply --server-side -f - | sed 's/^/    /'
  # The cache device is a file (the server's SSD); the image is nominal:
  # the stand-in kubelet runs the local rackcache-dataplane binary.
  kubectl apply --server-side -f - <<YAML | sed 's/^/    /'
apiVersion: rackcache.io/v1alpha1
kind: CachePool
metadata:
  name: $pool
spec:
  nodeSelector:
    rackcache.io/cache-server: "true"
  devices:
    - path: $cache_file
  allocationMode: Adaptive
  writeMode: WriteBack
  policies:
    seqCutoff: {policy: Never}
  port: $nvmf_port
  ceph:
    monitors: [$RACKCACHE_CEPH_MON_V1]
    secretRef: {name: ceph-rackcache, namespace: $ns}
  image: ghcr.io/rackcache/dataplane:v0.1.0
YAML
  if ! kubectl wait --for=condition=Ready --timeout=300s "cachepool/$pool" >/dev/null; then
    kubectl get cachepool "$pool" -o yaml >&2
    fail "$kube_dir/operator.log" "$kube_dir/kubelet.log"
  fi
  dp_pod="$(kubectl -n "$ns" get pods -l "rackcache.io/pool=$pool" -o jsonpath='{.items[0].metadata.name}')"
  rpc_sock="$(find "$kubelet_dir/$dp_pod" -name spdk.sock -type s | head -n 1)"
  [ -S "$rpc_sock" ] || die "no JSON-RPC socket under $kubelet_dir/$dp_pod"
  rpc=("$REPO_ROOT/bin/venv/bin/spdk-rpc" -s "$rpc_sock")
  kubectl -n "$ns" get daemonsets,pods -o wide | sed 's/^/    /'
  kubectl get cachepools | sed 's/^/    /'
}

volumes_step() {
  say "4/7 CachedVolumes: rbd/$img cached (write-back), rbd/$raw_img pass-through (the uncached baseline)"
  local hostnqn
  hostnqn="$(sed -n 's/^hostnqn=//p' "$REPO_ROOT/bin/guest/info")"
  kubectl apply --server-side -f - <<YAML | sed 's/^/    /'
apiVersion: rackcache.io/v1alpha1
kind: CachedVolume
metadata:
  name: $img
spec:
  poolName: $pool
  rbd: {pool: $RACKCACHE_CEPH_POOL, image: $img}
  size: 256Mi
  cacheSize: ${cache_mib}Mi
  writeMode: WriteBack
  rack: $rack
  allowedHosts: ["$hostnqn"]
---
apiVersion: rackcache.io/v1alpha1
kind: CachedVolume
metadata:
  name: $raw_img
spec:
  poolName: $pool
  rbd: {pool: $RACKCACHE_CEPH_POOL, image: $raw_img}
  size: 256Mi
  cacheSize: 16Mi
  writeMode: PassThrough
  rack: $rack
  allowedHosts: ["$hostnqn"]
YAML
  if ! kubectl wait --for=jsonpath='{.status.phase}'=Ready --timeout=300s "cachedvolume/$img" "cachedvolume/$raw_img" >/dev/null; then
    kubectl get cachedvolumes -o yaml >&2
    fail "$kube_dir/operator.log"
  fi
  local v address port
  for v in "$img" "$raw_img"; do
    read -r address port < <(kubectl get cachedvolume "$v" -o jsonpath='{.status.address} {.status.port}{"\n"}')
    # The guest reaches only the host's loopback (guestfwd to 127.0.0.1).
    [ "$address" = 127.0.0.1 ] || die "CachedVolume $v is served at $address, the guest reaches only 127.0.0.1"
    [ "$port" = "$nvmf_port" ] || die "CachedVolume $v is served on port $port, want the pool's $nvmf_port"
  done
  nqn="$(kubectl get cachedvolume "$img" -o jsonpath='{.status.nqn}')"
  raw_nqn="$(kubectl get cachedvolume "$raw_img" -o jsonpath='{.status.nqn}')"
  cached_bdev="$(ns_bdev "$nqn")"
  raw_bdev="$(ns_bdev "$raw_nqn")"
  echo "    $img: $nqn at 127.0.0.1:$nvmf_port, namespace 1 = bdev $cached_bdev (write-back, adaptive, $cache_mib MiB of cache)"
  echo "    $raw_img: $raw_nqn, namespace 1 = bdev $raw_bdev (pass-through: every I/O goes to Ceph)"
  echo "    allowed host: $hostnqn only"
  # The pool authenticates hosts (the default): the operator made the
  # guest's host a DH-HMAC-CHAP key pair per volume, in the volume's Secret.
  for v in "$img" "$raw_img"; do host_keys "$v" "$v-host-keys" "$hostnqn"; done
  echo "    host keys: Secrets $img-host-keys and $raw_img-host-keys (namespace $ns) hold the guest's DH-HMAC-CHAP"
  echo "    key pair for each volume; the guest proves its key, and checks the server's, on every queue"
}

# host_keys VOLUME SECRET HOSTNQN: copies HOSTNQN's keys from the volume's
# Secret into $demo_dir/keys/VOLUME.host and .ctrl (mode 0600), for the
# guest's nvme connect, as the kubelet hands them to the CSI node plugin.
host_keys() {
  local id dir="$demo_dir/keys" f
  id="$(printf %s "$3" | sha256sum | cut -c1-16)"
  (umask 077 && mkdir -p "$dir")
  for f in host:dhchap-secret ctrl:dhchap-ctrl-secret; do
    wait_until 60 "the host keys of $1" secret_field "$2" "$id.${f#*:}" || fail "$kube_dir/operator.log"
    (umask 077 && secret_field "$2" "$id.${f#*:}" >"$dir/$1.${f%%:*}")
  done
}

# secret_field SECRET KEY: prints the decoded value of KEY in the
# namespace's SECRET; fails when there is none.
secret_field() {
  local b64
  b64="$(kubectl -n "$ns" get secret "$1" -o jsonpath="{.data.${2//./\\.}}")" && [ -n "$b64" ] \
    && printf %s "$b64" | base64 -d
}

# ns_bdev NQN: the bdev behind namespace 1 of a subsystem on the dataplane.
ns_bdev() {
  dp_call nvmf_get_subsystems | "$REPO_ROOT/bin/venv/bin/python3" -c '
import json, sys
for s in json.load(sys.stdin):
    if s["nqn"] == sys.argv[1]:
        print(s["namespaces"][0]["bdev_name"])
' "$1"
}

# dataplane_pid: the PID of the dataplane pod's process.
dataplane_pid() { cat "$kubelet_dir/$dp_pod/pid" 2>/dev/null; }

kube_summary() {
  say "kubectl get cachepools,cachedvolumes"
  kubectl get cachepools,cachedvolumes | sed 's/^/    /'
  echo
  kubectl get cachepools,cachedvolumes -o wide | sed 's/^/    /'
}

# kube_stop stops the operator, the stand-in kubelet (which stops its
# dataplane pods), any dataplane a killed kubelet left, and the control
# plane, each by the PID it was started with.
kube_stop() {
  stop_bg csi-controller rackcache-csi
  stop_bg kube-proxy kubectl
  stop_bg operator rackcache-operator
  stop_bg kubelet demokube
  local f pid
  for f in "$kubelet_dir"/*/pid; do
    [ -f "$f" ] || continue
    pid="$(cat "$f")"
    if grep -qa rackcache-dataplane "/proc/$pid/cmdline" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  stop_bg control-plane demokube
}
