# Sourced by hack/cluster.sh: the nodes that run on the host beside the
# first cache server, each its containerd, kubelet and pods in a mount
# namespace of its own (kept alive by a bind mount of its nsfs file) where
# the paths every node names alike are its own:
#   /var/lib/kubelet, /var/log/pods, /var/log/containers  the kubelet's
#   /var/lib/rackcache                                    its dataplanes' saved configuration
#   /run/containerd                                       containerd 1.6's shim sockets
#   $dir/host/cache0.img                                  the pool's cache device path
# so that one CachePool (one device path) and one DaemonSet (one hostPath)
# mean another device and another directory on each node, as on separate
# machines. Mount events stay inside (private propagation both ways).
# Node 2 is the second cache server, node 3 the control node (the
# operator and the CSI controller).

# node_mntns N: node N's namespace file.
node_mntns() { echo "$dir/host$1/ns/mnt"; }

# is_mount PATH: something is mounted at PATH (in our mount namespace).
is_mount() { awk -v m="$1" '$5 == m { found = 1 } END { exit !found }' /proc/self/mountinfo; }

# node_mntns_up N: node N's namespace and its bind mounts, once.
node_mntns_up() {
  local h="$dir/host$1" ns="$dir/host$1/ns" own
  is_mount "$ns/mnt" && return 0
  mkdir -p "$ns" "$h/kubelet-root" "$h/dataplane-state" "$h/pod-logs" "$h/container-logs" "$h/run-containerd"
  [ -f "$h/cache0.img" ] || truncate -s "${CACHE_DEVICE_SIZE%i}" "$h/cache0.img"
  # An nsfs file can only be bind-mounted onto a private mount.
  is_mount "$ns" || mount --bind "$ns" "$ns"
  mount --make-private "$ns"
  : >"$ns/mnt"
  unshare --mount="$ns/mnt" --propagation private true || die "unshare: no mount namespace for node $1"
  # The mount points must exist on the machine: node 1 made the first two.
  mkdir -p /var/log/pods /var/log/containers /run/containerd
  own="mount --bind $h/kubelet-root $KUBELET_ROOT && mount --bind $h/dataplane-state $DATAPLANE_STATE"
  own+=" && mount --bind $h/pod-logs /var/log/pods && mount --bind $h/container-logs /var/log/containers"
  own+=" && mount --bind $h/run-containerd /run/containerd && mount --bind $h/cache0.img $dir/host/cache0.img"
  nsenter --mount="$ns/mnt" sh -ec "$own" || die "bind mounts of node $1's namespace"
}

# node_mntns_down N: once no process is left in it, the namespace goes
# with its mounts when its file is unmounted.
node_mntns_down() {
  local ns="$dir/host$1/ns"
  if is_mount "$ns/mnt"; then umount "$ns/mnt"; fi
  if is_mount "$ns"; then umount "$ns"; fi
}

# mntns_node_up N IMAGES SUBNET / mntns_node_down N
mntns_node_up() {
  node_mntns_up "$1"
  server_node_up "$1" "$2" "$3"
}

mntns_node_down() {
  server_node_kill "$1"
  node_mntns_down "$1"
  cgroup_root_remove "$CGROUP_ROOT-host$1"
}
