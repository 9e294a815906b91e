#!/usr/bin/env bash
# Builds the compute node of the local cluster (hack/cluster.sh): a qemu guest
# that boots Debian's stock kernel from a small busybox initramfs into a
# debootstrap'ed root file system holding containerd, runc, nvme-cli, the
# file system tools and the kubelet. It is the only kernel here that can
# `nvme connect`, so pods that mount cached volumes run on it. Debian 13
# (trixie: kernel 6.12 with NVMe in-band authentication, nvme-cli 2.13), as
# the test guest; RACKCACHE_CLUSTER_GUEST_SUITE=bookworm builds Debian 12's.
# hack/cluster/nodes.sh runs it on single-threaded TCG (docs/development.md:
# its kernel crashed on multi-threaded TCG).
#
# Usage: hack/cluster/guest-build.sh KUBELET [--help]
#   KUBELET   the kubelet binary to put into the root file system
#
# Builds once per key (Debian's kernel package and version, this recipe's
# version, the kubelet's sha256) into $RACKCACHE_CACHE/cluster-guest/<key>/
# and prints that directory. It holds:
#   vmlinuz     the kernel
#   initrd.gz   busybox, virtio_pci, virtio_blk and ext4: mounts /dev/vda, switch_root
#   rootfs.img  ext4, booted with snapshot=on (every boot starts clean)
# Needs root (debootstrap, chroot) and the Debian mirror of /etc/apt.
source "$(dirname "$0")/../lib.sh"
GUEST_SUITE="${RACKCACHE_CLUSTER_GUEST_SUITE:-trixie}"

# Bump when this script or hack/cluster/guest-init changes the guest.
GUEST_RECIPE=2
ROOTFS_MB=3072
MIRROR="${RACKCACHE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# What the node needs: the container runtime, the NVMe/TCP initiator's
# tools, the file systems the CSI node plugin formats, and the commands
# guest-init runs; tlshd (ktls-utils) for NVMe/TCP TLS (pools with
# dataPath.tls).
PACKAGES=(containerd runc iptables iproute2 nvme-cli socat kmod e2fsprogs xfsprogs
  util-linux mount procps ca-certificates containernetworking-plugins ktls-utils)
# Module trees too large and useless for a headless virtio guest.
SKIP_MODULES='drivers/(gpu|media|net/wireless|infiniband|staging|isdn|bluetooth|iio|hid|usb|input|video)|sound/'

case "${1:-}" in
  --help|-h) usage; exit 0 ;;
  "") die "KUBELET is required (see --help)" ;;
esac
kubelet="$1"
[ -x "$kubelet" ] || die "not an executable: $kubelet"
[ "$(id -u)" -eq 0 ] || die "building the guest root file system needs root (debootstrap, chroot)"
for tool in debootstrap apt-get apt-cache dpkg-deb depmod mke2fs cpio gzip; do
  command -v "$tool" >/dev/null || die "$tool not found: run hack/deps.sh apt"
done

guest_apt
debian_kernel
kubelet_sum="$(sha256sum "$kubelet" | cut -c1-12)"
recipe_sum="$(cat "$0" "$REPO_ROOT/hack/cluster/guest-init" "$REPO_ROOT/hack/guest/tlshd.conf" | sha256sum | cut -c1-8)"
key="${GUEST_SUITE}_${kver}_${kernel_version}_r${GUEST_RECIPE}-${recipe_sum}_kubelet-${kubelet_sum}"
out="$RACKCACHE_CACHE/cluster-guest/$key"

build() {
  [ -f "$out/.complete" ] && return 0
  mkdir -p "$RACKCACHE_CACHE/cluster-guest"
  local tmp
  tmp="$(mktemp -d "$RACKCACHE_CACHE/cluster-guest/.build.XXXXXX")"
  # shellcheck disable=SC2064 # expand now
  trap "umount -R '$tmp/root/proc' 2>/dev/null || true; rm -rf '$tmp'" EXIT
  local root="$tmp/root" kdir="$tmp/kernel" initrd="$tmp/initrd" result="$tmp/result"
  mkdir -p "$root" "$kdir" "$initrd" "$result"

  log "debootstrap $GUEST_SUITE (minbase) with ${PACKAGES[*]} (cold: ~3 min)"
  local include
  include="$(IFS=,; echo "${PACKAGES[*]}")"
  debootstrap --variant=minbase --include="$include" "$GUEST_SUITE" "$root" "$MIRROR" >"$tmp/debootstrap.log" 2>&1 \
    || { tail -n 20 "$tmp/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
  rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*

  log "kernel $kernel_pkg $kernel_version: modules"
  local dl
  dl="$(mktemp -d)" && chmod 0755 "$dl"
  if id _apt >/dev/null 2>&1; then chown _apt "$dl"; fi
  (cd "$dl" && apt-get "${APT_OPTS[@]}" download -q "$kernel_pkg=$kernel_version" >/dev/null) || die "apt-get download $kernel_pkg failed"
  dpkg-deb -x "$dl"/*.deb "$kdir" && rm -rf "$dl"
  local mods="lib/modules/$kver"
  # Debian 13's kernel package ships /usr/lib/modules (merged /usr).
  local kmods="$kdir/$mods"
  [ -d "$kmods" ] || kmods="$kdir/usr/$mods"
  (cd "$kmods" && find . -name '*.ko*' | grep -Ev "$SKIP_MODULES" \
    | cpio --quiet -pdm "$root/$mods")
  cp "$kmods"/modules.{order,builtin,builtin.modinfo} "$root/$mods/"
  depmod -b "$root" "$kver"

  log "kubelet and the node's own settings"
  install -m 0755 "$kubelet" "$root/usr/local/bin/kubelet"
  install -m 0755 "$REPO_ROOT/hack/cluster/guest-init" "$root/sbin/rackcache-node-init"
  # tlshd reads the PSKs the CSI node plugin puts into the .nvme keyring.
  install -m 0644 "$REPO_ROOT/hack/guest/tlshd.conf" "$root/etc/tlshd.conf"
  echo rackcache-guest >"$root/etc/hostname"
  printf '127.0.0.1 localhost\n10.0.3.15 rackcache-guest\n' >"$root/etc/hosts"
  : >"$root/etc/resolv.conf"
  # The machine id is set per boot by guest-init; the kubelet needs one.
  rm -f "$root/etc/machine-id"

  log "initramfs: busybox, virtio_pci, virtio_blk, ext4 and what they need"
  install -D -m 0755 /bin/busybox "$initrd/bin/busybox"
  local a
  for a in sh mount umount mkdir insmod switch_root sleep cat echo; do ln -s busybox "$initrd/bin/$a"; done
  local m
  while read -r m; do
    install -D -m 0644 "$root/$mods/$m" "$initrd/modules/$(basename "$m")"
    echo "$(basename "$m")" >>"$initrd/modules/order"
  done < <(modules_for "$root/$mods" virtio_pci virtio_blk ext4)
  cat >"$initrd/init" <<'EOF'
#!/bin/sh
# Load the root disk's driver and file system, then hand over to the disk.
mount -t devtmpfs devtmpfs /dev
mount -t proc proc /proc
exec </dev/console >/dev/console 2>&1
while read -r m; do insmod "/modules/$m" 2>/dev/null; done </modules/order
i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
mkdir -p /newroot
mount -t ext4 /dev/vda /newroot || { echo "rackcache-guest: cannot mount /dev/vda"; exec sh; }
umount /proc
exec switch_root /newroot /sbin/rackcache-node-init
EOF
  chmod 0755 "$initrd/init"
  mkdir -p "$initrd"/{dev,proc,newroot}
  (cd "$initrd" && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0) | gzip -9n >"$result/initrd.gz"
  install -m 0644 "$kdir/boot/vmlinuz-$kver" "$result/vmlinuz"

  log "rootfs.img (${ROOTFS_MB} MiB sparse ext4)"
  mke2fs -q -t ext4 -L rackcache-node -d "$root" "$result/rootfs.img" "${ROOTFS_MB}M" >/dev/null
  touch "$result/.complete"
  rm -rf "$out" && mv "$result" "$out"
  log "built $out"
  # Keep this build and the one before it (each is ~0.8 GiB).
  local old
  # shellcheck disable=SC2012 # names are our keys
  for old in $(ls -1dt "$RACKCACHE_CACHE"/cluster-guest/*/ | tail -n +3); do rm -rf "$old"; done
}

# modules_for MODDIR NAME...: the module files NAME need, dependencies first.
modules_for() {
  local moddir="$1"; shift
  local name
  for name in "$@"; do
    modprobe -d "${moddir%/lib/modules/*}" -S "$kver" --show-depends "$name" \
      | awk '$1 == "insmod" { sub(".*/lib/modules/[^/]*/", "", $2); print $2 }'
  done | awk '!seen[$0]++'
}

if [ ! -f "$out/.complete" ]; then
  with_lock cluster-guest build
fi
echo "$out"
