# Sourced by hack/cluster.sh: the two nodes. Both run inside the cluster's
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

host_node_up() {
  local assets="$1" images="$2" h="$dir/host"
  if [ -e "$KUBELET_ROOT" ] && ! marked "$KUBELET_MARKER"; then
    die "$KUBELET_ROOT exists and is not this cluster's: another kubelet uses this machine"
  fi
  if [ -e "$DATAPLANE_STATE" ] && ! marked "$DATAPLANE_MARKER"; then
    die "$DATAPLANE_STATE exists and is not this cluster's: a dataplane of something else uses this machine"
  fi
  mkdir -p "$h/cni" "$KUBELET_ROOT" "$DATAPLANE_STATE"
  [ -e /run/containerd ] || touch "$h/run-containerd-created"
  echo "$dir" >"$KUBELET_MARKER"
  echo "$dir" >"$DATAPLANE_MARKER"
  [ -f "$h/cache0.img" ] || truncate -s "${CACHE_DEVICE_SIZE%i}" "$h/cache0.img"
  config_runc_wrapper "$(command -v runc)" >"$h/runc" && chmod 0755 "$h/runc"
  config_cni 10.88.1.0/24 "$h/cni-ipam" >"$h/cni/10-rackcache.conflist"
  config_containerd "$h/containerd" "$h/containerd-state" "$h/containerd.sock" "$h/cni" "$h/runc" >"$h/containerd.toml"
  start containerd containerd --config "$h/containerd.toml"
  wait_for containerd 30 ctr --address "$h/containerd.sock" version
  local tar
  for tar in "$images"/*.tar; do
    [ -f "$tar" ] || continue
    ctr --address "$h/containerd.sock" -n k8s.io images import "$tar" >/dev/null || die "import $tar"
  done
  config_kubelet 0.0.0.0 "$dir/pki/ca.crt" "$h/containerd.sock" >"$h/kubelet.yaml"
  echo "cgroupRoot: /$CGROUP_ROOT" >>"$h/kubelet.yaml"
  cgroup_root_make
  start kubelet "$assets/kubelet" --config "$h/kubelet.yaml" --kubeconfig "$dir/pki/host-kubelet.kubeconfig" \
    --hostname-override "$HOST_NODE" --node-ip "$NODE_IP" --cert-dir "$h/kubelet-pki" \
    --node-labels "rackcache.io/cache-server=true,topology.rackcache.io/rack=rack-a" --v 1
}

host_node_down() {
  local h="$dir/host" sock="$dir/host/containerd.sock"
  stop kubelet
  if running containerd; then
    local id
    for id in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr --address "$sock" -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
  fi
  stop containerd
  # The runtime's shims outlive containerd; each names our socket.
  local pid
  for pid in $(grep -lsz -- "$sock" /proc/[0-9]*/cmdline | cut -d/ -f3); do
    { tr "\0" " " <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q containerd-shim && kill -KILL "$pid" 2>/dev/null || true
  done
  # Whatever still runs in a pod's cgroup is a container process of ours.
  cgroup_root_kill
  unmount_under "$KUBELET_ROOT" "$h"
  if marked "$KUBELET_MARKER"; then rm -rf "$KUBELET_ROOT" /var/log/pods /var/log/containers; fi
  if marked "$DATAPLANE_MARKER"; then rm -rf "$DATAPLANE_STATE"; fi
  # containerd 1.6 keeps shim sockets and fifos under /run/containerd
  # whatever its state directory: remove it when up made it.
  if [ -f "$h/run-containerd-created" ]; then rm -rf /run/containerd; fi
  cgroup_root_remove
}

# marked MARKER: the marker file names this cluster's directory.
marked() { [ "$(cat "$1" 2>/dev/null || true)" = "$dir" ]; }

# cgroup_dirs: the kubelet's cgroupRoot in every hierarchy (cgroup v1: one
# per controller; v2: one).
cgroup_dirs() {
  if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
    echo "/sys/fs/cgroup/$CGROUP_ROOT"
  else
    local h
    for h in /sys/fs/cgroup/*/; do
      [ -f "$h/cgroup.procs" ] && echo "$h$CGROUP_ROOT"
    done
  fi
}

# cgroup_root_kill: SIGKILL every process left below the cgroupRoot, until
# none is (a few rounds: a dying process may still be listed).
cgroup_root_kill() {
  local round pids cg
  for round in 1 2 3 4 5 6 7 8 9 10; do
    pids=""
    for cg in $(cgroup_dirs); do
      [ -d "$cg" ] && pids+=" $(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | tr '\n' ' ')"
    done
    [ -n "${pids// /}" ] || return 0
    # shellcheck disable=SC2086 # a list of PIDs
    kill -KILL $pids 2>/dev/null || true
    sleep 0.5
  done
  die "processes left in the pods' cgroups after SIGKILL:$pids"
}

cgroup_root_remove() {
  local cg
  for cg in $(cgroup_dirs); do
    [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
    [ ! -d "$cg" ] || log "warning: could not remove cgroup $cg"
  done
}

# cgroup_root_make: the kubelet's cgroupRoot (it must exist). cgroup v1: in
# every hierarchy, and a cpuset starts with no CPUs or memory nodes, so copy
# its parent's. cgroup v2: one directory, every controller delegated.
cgroup_root_make() {
  local cg parent
  for cg in $(cgroup_dirs); do
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
