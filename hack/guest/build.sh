#!/usr/bin/env bash
# Builds the qemu test guest: Debian's stock kernel (of GUEST_SUITE, trixie:
# 6.12, with NVMe in-band authentication and TLS) and a small initramfs with
# busybox, nvme-cli, tlshd and the kernel modules of the NVMe/TCP initiator (and of a
# guest-local nvmet-tcp reference target), whose /init runs a job appended by
# hack/guest/run.sh.
#
# Usage: hack/guest/build.sh [--force] [--help]
#   --force   rebuild even when the cache already has this build
#
# Builds once: the result lives in $RACKCACHE_CACHE/guest/<key>/ (key: the
# kernel package's name and version and this recipe's version) and bin/guest
# links to it. Prints that directory. It holds:
#   vmlinuz     the kernel
#   initrd.gz   the initramfs (gzip'ed newc cpio)
#   info        what went in (package versions, modules, host NQN)
# Packages are fetched with `apt-get download` and unpacked with dpkg-deb,
# never installed. Needs: apt, dpkg-deb, depmod (kmod), cpio, gzip.
source "$(dirname "$0")/../lib.sh"
source "$REPO_ROOT/hack/debroot.sh"

# Bump when this script or hack/guest/init changes what goes into the guest,
# so that every clone rebuilds instead of reusing a stale cache entry.
GUEST_RECIPE=6

# Loaded by /init at boot: the NIC and the NVMe/TCP initiator; configfs is
# mounted at boot (nvmet needs it, and it is cheap).
BOOT_MODULES=(virtio_pci virtio_net nvme-tcp configfs)
# Shipped for `modprobe` in jobs: a reference target (nvmet-tcp on a brd RAM
# disk), crc32c for NVMe/TCP header and data digests, ext4 to put a
# filesystem on an attached namespace (xfs too: the CSI node plugin formats both),
# and kernel TLS with AES-GCM (ctr and aes are built in), which NVMe/TCP's
# secure channel runs on once tlshd has made
# the handshake.
EXTRA_MODULES=(nvmet nvmet-tcp brd crc32c_generic ext4 xfs tls gcm ghash-generic)

# A fixed host identity: NVMe/TCP targets allow hosts by NQN and expect the
# NQN/ID pair to stay the same across connections and boots. Jobs that need
# another host identity overwrite these files with run.sh --file.
GUEST_HOSTID="5f1b0c2e-8d4a-4c61-9b7e-2a3d6e9f0c41"
GUEST_HOSTNQN="nqn.2014-08.org.nvmexpress:uuid:$GUEST_HOSTID"

force=0
while [ $# -gt 0 ]; do
  case "$1" in
    --help|-h) usage; exit 0 ;;
    --force) force=1; shift ;;
    *) die "unknown option: $1 (see --help)" ;;
  esac
done

for tool in apt-get apt-cache dpkg-deb depmod cpio gzip; do
  command -v "$tool" >/dev/null || die "$tool not found: run hack/deps.sh apt"
done

guest_apt
debian_kernel

key="${kver}_${kernel_version}_r${GUEST_RECIPE}"
out="$RACKCACHE_CACHE/guest/$key"

# module_order ROOT MODULE...: the modules' files (relative to the module
# directory) with their dependencies from modules.dep, each after everything
# it needs (modules.dep lists a module's dependencies so that loading them in
# reverse order works) and each once.
module_order() {
  local moddir="$1"; shift
  awk -v want="$*" '
    function norm(s) { gsub(/-/, "_", s); return s }
    function base(path,   b) { b = path; sub(/.*\//, "", b); sub(/\.ko(\.[a-z]+)?$/, "", b); return norm(b) }
    BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) wanted[norm(w[i])] = i }
    {
      file = $1; sub(/:$/, "", file); m = base(file)
      if (!(m in wanted)) next
      found[m] = 1
      line[wanted[m]] = $0
    }
    END {
      for (i = 1; i <= n; i++) {
        m = norm(w[i])
        if (!(m in found)) { print "missing module " w[i] > "/dev/stderr"; bad = 1; continue }
        k = split(line[i], f, " ")
        sub(/:$/, "", f[1])
        for (j = k; j >= 2; j--) if (!(f[j] in done)) { print f[j]; done[f[j]] = 1 }
        if (!(f[1] in done)) { print f[1]; done[f[1]] = 1 }
      }
      exit bad
    }' "$moddir/modules.dep"
}

# without_builtin MODDIR MODULE...: the MODULEs that are not built into the
# kernel (modules.builtin), one per line.
without_builtin() {
  local moddir="$1" m; shift
  for m in "$@"; do
    grep -qE "/${m//[-_]/[-_]}\.ko$" "$moddir/modules.builtin" || echo "$m"
  done
}

# copy_with_libs ROOT BIN STAGE: copy ROOT/BIN to STAGE/BIN plus the shared
# libraries and loader it needs, resolved by the downloaded glibc's own loader
# against the downloaded libraries (what ldd does), at their paths in ROOT.
copy_with_libs() {
  local root="$1" bin="$2" stage="$3" loader lib
  loader="$root/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
  [ -x "$loader" ] || die "downloaded libc6 has no $loader"
  install -D -m 0755 "$root$bin" "$stage$bin"
  local listing
  listing="$("$loader" --library-path "$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu" \
    --list "$root$bin")" || die "cannot list the libraries of $bin:
$listing"
  while read -r lib; do
    case "$lib" in
      "$root"/*) install -D -m 0755 "$(readlink -f "$lib")" "$stage${lib#"$root"}" ;;
      /*) die "$bin needs $lib, which no downloaded package provides" ;;
      *) die "$bin: unresolved library: $lib" ;;
    esac
  done < <(awk '$2 == "=>" && $3 == "not" { print $1 " not found"; next }
               $2 == "=>" { print $3 }' <<<"$listing")
  install -D -m 0755 "$(readlink -f "$loader")" "$stage/lib64/ld-linux-x86-64.so.2"
}

build() {
  if [ -f "$out/.complete" ] && [ "$force" = 0 ]; then
    return 0
  fi
  mkdir -p "$RACKCACHE_CACHE/guest"
  local tmp
  tmp="$(mktemp -d "$RACKCACHE_CACHE/guest/.build.XXXXXX")"
  # apt downloads as the unprivileged _apt user, who cannot enter root's
  # cache: download into a world-readable temp dir of its own.
  local dl
  dl="$(mktemp -d)"
  # shellcheck disable=SC2064 # expand now: both are local to this function
  trap "rm -rf '$tmp' '$dl'" EXIT
  chmod 0755 "$dl"
  local root="$tmp/root" stage="$tmp/stage" result="$tmp/result"
  mkdir -p "$root" "$stage" "$result"

  local pkgs
  mapfile -t pkgs < <(lib_closure nvme-cli ktls-utils)
  pkgs+=("$kernel_pkg=$kernel_version" busybox-static)
  log "downloading ${pkgs[*]}"
  download_debs "$dl" "${pkgs[@]}"
  unpack_debs "$root" "$dl"/*.deb

  local moddir="$root/lib/modules/$kver"
  [ -f "$root/boot/vmlinuz-$kver" ] && [ -d "$moddir" ] || die "$kernel_pkg has no kernel or modules"
  # The package ships no modules.dep (the installed system makes it).
  depmod -b "$root" "$kver"

  # busybox with every applet as a symlink; it is our shell, init's tools,
  # insmod/modprobe, ip, nc, dd, md5sum, timeout.
  install -D -m 0755 "$root/bin/busybox" "$stage/bin/busybox"
  local applet
  while read -r applet; do
    [ "$applet" = bin/busybox ] && continue
    mkdir -p "$stage/$(dirname "$applet")"
    [ -e "$stage/$applet" ] || ln -s /bin/busybox "$stage/$applet"
  done < <("$root/bin/busybox" --list-full)

  # Kernel modules: the boot set in load order, plus the extras for modprobe.
  local list boot extra m
  # Built into this kernel (virtio_pci is in 6.12): nothing to load.
  mapfile -t BOOT_MODULES < <(without_builtin "$moddir" "${BOOT_MODULES[@]}")
  mapfile -t EXTRA_MODULES < <(without_builtin "$moddir" "${EXTRA_MODULES[@]}")
  list="$(module_order "$moddir" "${BOOT_MODULES[@]}")" || die "modules missing from $kernel_pkg"
  mapfile -t boot <<<"$list"
  list="$(module_order "$moddir" "${EXTRA_MODULES[@]}")" || die "modules missing from $kernel_pkg"
  mapfile -t extra <<<"$list"
  for m in "${boot[@]}" "${extra[@]}"; do
    install -D -m 0644 "$moddir/$m" "$stage/lib/modules/$kver/$m"
  done
  cp "$moddir/modules.order" "$moddir/modules.builtin" "$moddir/modules.builtin.modinfo" \
    "$stage/lib/modules/$kver/"
  printf '%s\n' "${boot[@]}" >"$stage/lib/modules/$kver/boot.order"
  # modules.dep of just what we ship, for busybox modprobe in jobs.
  depmod -b "$stage" "$kver"

  # nvme-cli and what it links against.
  copy_with_libs "$root" /usr/sbin/nvme "$stage"
  mkdir -p "$stage/etc/nvme"
  echo "$GUEST_HOSTNQN" >"$stage/etc/nvme/hostnqn"
  echo "$GUEST_HOSTID" >"$stage/etc/nvme/hostid"

  # tlshd (ktls-utils): the user-space TLS handshake the kernel's NVMe/TCP
  # host asks for with `nvme connect --tls`; it reads the PSKs that nvme-cli
  # puts into the kernel's .nvme keyring. Jobs start it (hack/guest/init
  # does not: most jobs need no TLS).
  copy_with_libs "$root" /usr/sbin/tlshd "$stage"
  install -D -m 0644 "$REPO_ROOT/hack/guest/tlshd.conf" "$stage/etc/tlshd.conf"

  mkdir -p "$stage"/{proc,sys,dev,tmp,run,root,job,mnt,etc} "$stage/sys/kernel/config"
  echo "root:x:0:0:root:/root:/bin/sh" >"$stage/etc/passwd"
  echo "root:x:0:" >"$stage/etc/group"
  install -m 0755 "$REPO_ROOT/hack/guest/init" "$stage/init"

  # Sorted names and root ownership make the archive independent of who
  # built it and in which order the file system lists it.
  # What the image holds, for run.sh --bin: a host binary's library that
  # the guest already has (glibc above all) is not copied over it, since a
  # newer glibc runs binaries built against an older one, not the reverse.
  (cd "$stage" && find . -mindepth 1 ! -type d | sed 's|^\.||' | LC_ALL=C sort) >"$result/files"
  (cd "$stage" && find . -mindepth 1 | LC_ALL=C sort \
    | cpio --quiet -o -H newc -R 0:0 --reproducible) | gzip -9n >"$result/initrd.gz"
  install -m 0644 "$root/boot/vmlinuz-$kver" "$result/vmlinuz"

  {
    echo "recipe=$GUEST_RECIPE"
    echo "kernel=$kver"
    echo "hostnqn=$GUEST_HOSTNQN"
    echo "hostid=$GUEST_HOSTID"
    echo "boot_modules=${boot[*]}"
    echo "extra_modules=${EXTRA_MODULES[*]}"
    echo "packages:"
    for deb in "$dl"/*.deb; do dpkg-deb --show --showformat='  ${Package} ${Version}\n' "$deb"; done
  } >"$result/info"
  touch "$result/.complete"

  rm -rf "$out"
  mv "$result" "$out"
  log "built $out ($(du -h "$out/initrd.gz" | cut -f1) initrd)"
}

if [ ! -f "$out/.complete" ] || [ "$force" = 1 ]; then
  with_lock guest build
fi
link_into_bin guest "$out"
echo "$out"
