# Sourced by hack/cluster.sh: the nodes. All run inside the cluster's
# network namespace; the guest is a qemu process there, its own kernel and
# network behind qemu's restricted user network.

# The host node's state outside $dir: the kubelet keeps pods' volumes under
# /var/lib/kubelet and logs under /var/log/pods whatever --root-dir says,
# so they are checked to be ours before use and removed by `down`.
KUBELET_ROOT=/var/lib/kubelet
KUBELET_MARKER="$KUBELET_ROOT/.rackcache-cluster"
# The dataplanes keep their configuration on the node (a hostPath): state
# of an earlier cluster would point at a Ceph cluster that is gone.
DATAPLANE_STATE=/var/lib/rackcache
DATAPLANE_MARKER="$DATAPLANE_STATE/.rackcache-cluster"
# Pod cgroups of the host kubelet live under this root in every hierarchy.
CGROUP_ROOT=rackcache-cluster

# The host's nodes. Node 1 (HOST_NODE, a cache server) uses the machine's
# own /var/lib/kubelet, /var/lib/rackcache and /run/containerd; node 2
# (HOST2_NODE, the second cache server) and node 3 (CONTROL_NODE, where the
# operator and the CSI controller run, so that losing a cache server never
# takes them along) each run in a mount namespace of their own
# (hack/cluster/mntns.sh). All share the cluster's network namespace, each
# with its own address (no veth driver here to give them separate ones).
#
# server_node N: sets sn_* to node N's name, address, labels, state
# directory, process names, cgroupRoot, kubeconfig and the command prefix
# that enters its mount namespace.
server_node() {
  local cache="rackcache.io/cache-server=true,topology.rackcache.io/rack=rack-a"
  case "$1" in
    1) sn_name=$HOST_NODE sn_ip=$NODE_IP sn_labels=$cache sn_dir="$dir/host" sn_containerd=containerd sn_kubelet=kubelet
       sn_cgroup=$CGROUP_ROOT sn_kubeconfig="$dir/pki/host-kubelet.kubeconfig" sn_enter=() ;;
    2|3) sn_dir="$dir/host$1" sn_containerd="containerd-host$1" sn_kubelet="kubelet-host$1"
       sn_cgroup="$CGROUP_ROOT-host$1" sn_kubeconfig="$dir/pki/host$1-kubelet.kubeconfig"
       sn_enter=(nsenter "--mount=$(node_mntns "$1")") ;;
    *) die "no host node $1 (1, 2 or 3)" ;;
  esac
  case "$1" in
    2) sn_name=$HOST2_NODE sn_ip=$NODE2_IP sn_labels=$cache ;;
    3) sn_name=$CONTROL_NODE sn_ip=$NODE3_IP sn_labels="rackcache.io/control=true" ;;
  esac
}

# server_node_of NAME: the number of the cache-server node called NAME.
server_node_of() {
  case "$1" in
    "$HOST_NODE") echo 1 ;;
    "$HOST2_NODE") echo 2 ;;
    *) die "$1 is not a cache-server node of this cluster ($HOST_NODE, $HOST2_NODE)" ;;
  esac
}

host_node_up() {
  local images="$1" h="$dir/host"
  if [ -e "$KUBELET_ROOT" ] && ! marked "$KUBELET_MARKER"; then
    die "$KUBELET_ROOT exists and is not this cluster's: another kubelet uses this machine"
  fi
  if [ -e "$DATAPLANE_STATE" ] && ! marked "$DATAPLANE_MARKER"; then
    die "$DATAPLANE_STATE exists and is not this cluster's: a dataplane of something else uses this machine"
  fi
  mkdir -p "$h" "$KUBELET_ROOT" "$DATAPLANE_STATE"
  [ -e /run/containerd ] || touch "$h/run-containerd-created"
  echo "$dir" >"$KUBELET_MARKER"
  echo "$dir" >"$DATAPLANE_MARKER"
  server_node_up 1 "$images" 10.88.1.0/24
}

# server_node_up N IMAGES SUBNET: node N's configuration, its containerd
# with the images a cache server runs, and its kubelet.
server_node_up() {
  server_node "$1"
  local images="$2" subnet="$3" h="$sn_dir"
  mkdir -p "$h/cni"
  [ -f "$h/cache0.img" ] || truncate -s "${CACHE_DEVICE_SIZE%i}" "$h/cache0.img"
  config_runc_wrapper "$(command -v runc)" >"$h/runc" && chmod 0755 "$h/runc"
  config_cni "$subnet" "$h/cni-ipam" >"$h/cni/10-rackcache.conflist"
  config_containerd "$h/containerd" "$h/containerd-state" "$h/containerd.sock" "$h/cni" "$h/runc" >"$h/containerd.toml"
  # Its own address only: both nodes' kubelets listen in one namespace.
  config_kubelet "$sn_ip" "$dir/pki/ca.crt" "$h/containerd.sock" "$sn_ip" >"$h/kubelet.yaml"
  echo "cgroupRoot: /$sn_cgroup" >>"$h/kubelet.yaml"
  cgroup_root_make "$sn_cgroup"
  server_containerd_start "$1"
  local tar
  for tar in "$images"/*.tar; do
    [ -f "$tar" ] || continue
    ctr --address "$h/containerd.sock" -n k8s.io images import "$tar" >/dev/null || die "import $tar"
  done
  server_node_start "$1"
}

server_containerd_start() {
  server_node "$1"
  start "$sn_containerd" "${sn_enter[@]}" containerd --config "$sn_dir/containerd.toml"
  wait_for "$sn_containerd" 30 ctr --address "$sn_dir/containerd.sock" version
}

# server_node_start N: node N's containerd and kubelet; also what
# `node-start` runs to bring a stopped node back.
server_node_start() {
  server_containerd_start "$1"
  server_node "$1"
  start "$sn_kubelet" "${sn_enter[@]}" "$dir/bin/kubelet" --config "$sn_dir/kubelet.yaml" --kubeconfig "$sn_kubeconfig" \
    --hostname-override "$sn_name" --node-ip "$sn_ip" --cert-dir "$sn_dir/kubelet-pki" \
    --node-labels "$sn_labels" --v 1
}

# server_node_kill N: node N as after a power cut: its kubelet, containerd,
# the runtime's shims and every container process get SIGKILL, nothing is
# unmounted or removed. `node-stop` runs it; `down` runs it before cleaning.
server_node_kill() {
  server_node "$1"
  local sock="$sn_dir/containerd.sock" pid
  stop "$sn_kubelet" KILL
  stop "$sn_containerd" KILL
  # The runtime's shims outlive containerd; each names its socket.
  for pid in $(grep -lsz -- "$sock" /proc/[0-9]*/cmdline | cut -d/ -f3); do
    { tr "\0" " " <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q containerd-shim && kill -KILL "$pid" 2>/dev/null || true
  done
  # Whatever still runs in a pod's cgroup is a container process of ours.
  cgroup_root_kill "$sn_cgroup"
}

host_node_down() {
  local h="$dir/host"
  server_node_kill 1
  unmount_under "$KUBELET_ROOT" "$h"
  if marked "$KUBELET_MARKER"; then rm -rf "$KUBELET_ROOT" /var/log/pods /var/log/containers; fi
  if marked "$DATAPLANE_MARKER"; then rm -rf "$DATAPLANE_STATE"; fi
  # containerd 1.6 keeps shim sockets and fifos under /run/containerd
  # whatever its state directory: remove it when up made it.
  if [ -f "$h/run-containerd-created" ]; then rm -rf /run/containerd; fi
  cgroup_root_remove "$CGROUP_ROOT"
}

# marked MARKER: the marker file names this cluster's directory.
marked() { [ "$(cat "$1" 2>/dev/null || true)" = "$dir" ]; }

# cgroup_dirs ROOT: a kubelet's cgroupRoot in every hierarchy (cgroup v1:
# one per controller; v2: one).
cgroup_dirs() {
  if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
    echo "/sys/fs/cgroup/$1"
  else
    local h
    for h in /sys/fs/cgroup/*/; do
      [ -f "$h/cgroup.procs" ] && echo "$h$1"
    done
  fi
}

# cgroup_root_kill ROOT: SIGKILL every process left below the cgroupRoot, until
# none is (a few rounds: a dying process may still be listed).
cgroup_root_kill() {
  local round pids cg
  for round in 1 2 3 4 5 6 7 8 9 10; do
    pids=""
    for cg in $(cgroup_dirs "$1"); do
      [ -d "$cg" ] && pids+=" $(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | tr '\n' ' ')"
    done
    [ -n "${pids// /}" ] || return 0
    # shellcheck disable=SC2086 # a list of PIDs
    kill -KILL $pids 2>/dev/null || true
    sleep 0.5
  done
  die "processes left in the pods' cgroups after SIGKILL:$pids"
}

# cgroup_root_remove ROOT: its (empty) cgroups.
cgroup_root_remove() {
  local cg
  for cg in $(cgroup_dirs "$1"); do
    [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
    [ ! -d "$cg" ] || log "warning: could not remove cgroup $cg"
  done
}

# cgroup_root_make ROOT: a kubelet's cgroupRoot (it must exist). cgroup v1: in
# every hierarchy, and a cpuset starts with no CPUs or memory nodes, so copy
# its parent's. cgroup v2: one directory, every controller delegated.
cgroup_root_make() {
  local cg parent
  for cg in $(cgroup_dirs "$1"); do
    mkdir -p "$cg"
    parent="$(dirname "$cg")"
    if [ -f "$parent/cpuset.cpus" ] && [ ! -f "$parent/cgroup.subtree_control" ]; then
      cat "$parent/cpuset.cpus" >"$cg/cpuset.cpus"
      cat "$parent/cpuset.mems" >"$cg/cpuset.mems"
    fi
    if [ -f "$cg/cgroup.subtree_control" ]; then
      local c
      for c in $(cat "$cg/cgroup.controllers"); do echo "+$c" >"$cg/cgroup.subtree_control" 2>/dev/null || true; done
    fi
  done
}

# unmount_under DIR...: every mount below DIR, deepest first.
unmount_under() {
  local d m
  for d in "$@"; do
    [ -d "$d" ] || continue
    d="$(readlink -f "$d")"
    while read -r m; do umount -l "$m" 2>/dev/null || true; done < <(awk -v d="$d/" \
      'index($5 "/", d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  done
}

# guest_node_up GUEST IMAGES: the data disk, then qemu.
guest_node_up() {
  local guest="$1" images="$2" g="$dir/guest"
  command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found: run hack/deps.sh apt"
  running qemu && return 0
  rm -rf "$g/data" && mkdir -p "$g/data/images"
  cp "$dir/pki/guest-kubelet.kubeconfig" "$g/data/kubeconfig"
  cp "$dir/pki/ca.crt" "$g/data/ca.crt"
  config_kubelet 0.0.0.0 /etc/kubernetes/ca.crt /run/containerd/containerd.sock >"$g/data/kubelet.yaml"
  config_cni 10.88.2.0/24 /var/lib/cni/networks >"$g/data/cni.conflist"
  config_containerd /var/lib/containerd /run/containerd /run/containerd/containerd.sock /etc/cni/net.d runc >"$g/data/containerd.toml"
  # The guest imports only what runs on a compute node.
  local ref file
  while read -r ref file; do
    case "$ref" in
      *pause*|*rackcache-csi*|*busybox*) cp "$images/$file" "$g/data/images/" ;;
    esac
  done <"$images/images.txt"
  cat >"$g/data/node.env" <<EOF
NODE_NAME=$GUEST_NODE
NODE_LABELS=rackcache.io/compute=true,topology.rackcache.io/rack=rack-a
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:7d2e1a90-4c3b-4e8f-9a61-0b5c2d7e3f18
HOSTID=7d2e1a90-4c3b-4e8f-9a61-0b5c2d7e3f18
EOF
  mke2fs -q -t ext4 -d "$g/data" "$g/data.img" "$(( $(du -sm "$g/data" | cut -f1) + 64 ))M" >/dev/null
  # restrict=on: the guest reaches nothing but the guestfwd endpoints, all
  # inside the cluster's network namespace; hostfwd binds its loopback.
  local netdev="user,id=n1,net=10.0.3.0/24,host=10.0.3.2,dns=10.0.3.3,restrict=on"
  netdev+=",guestfwd=tcp:10.0.3.100:$APISERVER_PORT-cmd:socat - TCP:127.0.0.1:$APISERVER_PORT"
  netdev+=",guestfwd=tcp:10.0.3.100:$NVME_PORT-cmd:socat - TCP:$NODE_IP:$NVME_PORT"
  netdev+=",guestfwd=tcp:10.0.3.100:$NVME2_GUEST_PORT-cmd:socat - TCP:$NODE2_IP:$NVME_PORT"
  netdev+=",hostfwd=tcp:127.0.0.1:$GUEST_KUBELET_PORT-10.0.3.15:10250"
  # Single-threaded TCG: one host thread runs both vCPUs in turn. Debian
  # 13's kernel, on multi-threaded TCG, crashed at boot patching a static
  # branch while the other vCPU ran it (docs/development.md); the e2e smoke
  # specs took 90 s either way.
  start qemu qemu-system-x86_64 -name rackcache-cluster-guest \
    -nodefaults -no-user-config -display none -monitor none -no-reboot \
    -accel "tcg,thread=${RACKCACHE_CLUSTER_TCG_THREAD:-single},tb-size=256" -cpu "$GUEST_CPU" -smp 2 -m "${RACKCACHE_GUEST_MEM:-1536}" \
    -kernel "$guest/vmlinuz" -initrd "$guest/initrd.gz" \
    -append "console=ttyS0 rdinit=/init panic=-1 loglevel=4 mitigations=off" \
    -drive "file=$guest/rootfs.img,if=virtio,format=raw,snapshot=on,cache=unsafe" \
    -drive "file=$g/data.img,if=virtio,format=raw,readonly=on" \
    -chardev "file,id=con0,path=$dir/logs/guest-console.log" -serial chardev:con0 \
    -netdev "$netdev" -device virtio-net-pci,netdev=n1,romfile=
  # -s: qemu creates the console file a moment after it starts.
  local console="$dir/logs/guest-console.log" i=0
  until grep -qs RACKCACHE-NODE-UP "$console"; do
    if grep -qs RACKCACHE-NODE-FAILED "$console"; then
      die "the guest node failed: $(grep -a -B1 RACKCACHE-NODE-FAILED "$console" | head -n1)"
    fi
    running qemu || die "qemu exited: $(tail -n 5 "$console")"
    [ $i -lt 240 ] || die "the guest's containerd not up after 240 s (console: $console)"
    sleep 1; i=$((i + 1))
  done
}

guest_node_down() {
  stop qemu
}
