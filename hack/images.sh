#!/usr/bin/env bash
# Builds rackcache's container images as image tarballs without a Docker
# engine or a registry (none is reachable), for a local containerd to import
# (`ctr -n k8s.io images import FILE.tar`):
#   ghcr.io/rackcache/rackcache-operator:<appVersion>   static, /rackcache-operator
#   ghcr.io/rackcache/rackcache-csi:<appVersion>        cgo (librbd), nvme-cli,
#       e2fsprogs, xfsprogs, mount/umount/blkid/findmnt/lsblk/blockdev, sh
#   ghcr.io/rackcache/rackcache-dataplane:<appVersion>  release build, librbd
#   registry.k8s.io/pause:3.10 (also tagged with containerd's sandbox_image)
#   the CSI sidecars of charts/rackcache/values.yaml (hack/sidecars.sh) and
#   snapshot-controller
#   rackcache.local/busybox:<major.minor>: the e2e suite's workload image
#       (Debian's busybox-static with every applet), what hack/cluster.sh runs
# <appVersion> is charts/rackcache/Chart.yaml's. Binaries come from this
# checkout (go build, cargo build --release); shared libraries, tools and
# librados' plugins from this Debian host (ldd, transitively). Each image is
# one layer packed by hack/tools/ociimage (go-containerregistry) with zero
# timestamps, so the same inputs give the same digests.
#
# Output: $RACKCACHE_CACHE/images/<key>/ with one <name>.tar per image,
# images.txt ("ref file" lines) and snapshot-crds/ (the VolumeSnapshot CRDs
# the snapshotter needs, for `kubectl apply -f`). <key> hashes every file put
# into the images, so nothing is packed again when nothing changed. The
# directory is printed on stdout. docs/images.md has the details.
#
# Usage: hack/images.sh [--print-dir] [--help]
#   --print-dir   print only the directory (no summary); builds first if needed
source "$(dirname "$0")/lib.sh"
source "$REPO_ROOT/hack/sidecars.sh"
shopt -s inherit_errexit

# Bump when what goes into an image changes without its files changing.
IMAGES_SCRIPT_VERSION=1
REGISTRY="ghcr.io/rackcache"
PAUSE_IMAGES=(registry.k8s.io/pause:3.10)
# containerd 1.6's default sandbox_image (`containerd config default`).
PAUSE_IMAGES+=(registry.k8s.io/pause:3.6)
CEPH_PLUGIN_DIR=/usr/lib/x86_64-linux-gnu/ceph
# What the node plugin and mount-utils run (csi/nvme, k8s.io/mount-utils):
# nvme-cli; mkfs, fsck and resize for ext4 and xfs; mount tools.
CSI_TOOLS=(
  /usr/sbin/nvme
  /usr/sbin/mke2fs /usr/sbin/mkfs.ext4 /usr/sbin/e2fsck /usr/sbin/fsck.ext4 /usr/sbin/fsck
  /usr/sbin/resize2fs /usr/sbin/dumpe2fs /usr/sbin/tune2fs
  /usr/sbin/mkfs.xfs /usr/sbin/xfs_growfs /usr/sbin/xfs_repair /usr/sbin/fsck.xfs
  /usr/bin/mount /usr/bin/umount /usr/sbin/blkid /usr/bin/findmnt /usr/bin/lsblk /usr/sbin/blockdev
)
CSI_APT=(nvme-cli e2fsprogs xfsprogs mount util-linux busybox-static librbd1 librados2)

print_only=false
for arg in "$@"; do
  case "$arg" in
    --help|-h) usage; exit 0 ;;
    --print-dir) print_only=true ;;
    *) die "unknown argument: $arg (see --help)" ;;
  esac
done

app_version="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$REPO_ROOT/charts/rackcache/Chart.yaml")"
[ -n "$app_version" ] || die "no appVersion in charts/rackcache/Chart.yaml"

command -v objcopy >/dev/null || die "objcopy (binutils) not found"
for p in "${CSI_APT[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || die "Debian package $p is missing: run hack/deps.sh apt"
done

# go_tool NAME: build hack/tools/NAME (a module of its own) statically into
# the cache, keyed by its sources; sets TOOL_BIN to the binary.
go_tool() {
  local name="$1" src="$REPO_ROOT/hack/tools/$1" key dir
  key="$(find "$src" -maxdepth 1 -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) \
    | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-12)"
  dir="$RACKCACHE_CACHE/tools/$name-$key"
  if [ ! -x "$dir/$name" ]; then
    log "building hack/tools/$name"
    with_lock "tool-$name-$key" env CGO_ENABLED=0 \
      go build -C "$src" -trimpath -ldflags "-s -w" -o "$dir/$name" . >&2
  fi
  TOOL_BIN="$dir/$name"
}

# copy_into ROOT PATH: copy a host file into ROOT at the same path; a symlink
# is copied as a symlink, then its target too.
copy_into() {
  local root="$1" p="$2" target
  while :; do
    p="$(readlink -f "$(dirname "$p")")/$(basename "$p")"
    if [ -e "$root$p" ] || [ -L "$root$p" ]; then return 0; fi
    mkdir -p "$root$(dirname "$p")"
    if [ -L "$p" ]; then
      target="$(readlink "$p")"
      ln -s "$target" "$root$p"
      case "$target" in /*) p="$target" ;; *) p="$(dirname "$p")/$target" ;; esac
    else
      [ -f "$p" ] || die "$p: not a file"
      cp -p "$p" "$root$p"
      return 0
    fi
  done
}

# add_elf ROOT PATH [IMAGEPATH]: a dynamically linked program or library and
# every shared library it needs (ldd is transitive), the loader included.
add_elf() {
  local root="$1" p="$2" dst="${3:-$2}" libs lib
  if [ "$dst" = "$p" ]; then
    copy_into "$root" "$p"
  else
    mkdir -p "$root$(dirname "$dst")" && cp -p "$p" "$root$dst"
  fi
  libs="$(ldd "$p" 2>&1)" || { grep -q 'not a dynamic executable' <<<"$libs" && return 0; die "ldd $p: $libs"; }
  if grep -q 'not found' <<<"$libs"; then die "ldd $p: $(grep 'not found' <<<"$libs")"; fi
  for lib in $(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$libs"); do
    copy_into "$root" "$lib"
  done
}

# stage_base ROOT [usr]: what every image has (root and nonroot users, /tmp,
# /etc/mtab, mount points); with "usr", Debian's merged /usr layout too (/lib -> usr/lib, ...).
stage_base() {
  local root="$1"
  mkdir -p "$root/etc" "$root/tmp" "$root/proc" "$root/sys" "$root/dev"
  chmod 1777 "$root/tmp"
  # e2fsprogs refuse to work without it (is the filesystem mounted?).
  ln -s ../proc/self/mounts "$root/etc/mtab"
  printf 'root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
  if [ "${2:-}" = usr ]; then
    mkdir -p "$root/usr/bin" "$root/usr/sbin" "$root/usr/lib" "$root/usr/lib64"
    ln -s usr/bin "$root/bin"; ln -s usr/sbin "$root/sbin"
    ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"
    [ -f /etc/ssl/certs/ca-certificates.crt ] && copy_into "$root" /etc/ssl/certs/ca-certificates.crt
  fi
  return 0
}

# add_ceph ROOT: librados' plugins (compressors, crypto) that it dlopens from
# $CEPH_PLUGIN_DIR, with their libraries. The erasure-code plugins are the
# OSDs', not a client's.
add_ceph() {
  local root="$1" f
  for f in "$CEPH_PLUGIN_DIR"/compressor/* "$CEPH_PLUGIN_DIR"/crypto/*; do
    if [ -L "$f" ]; then copy_into "$root" "$f"; else add_elf "$root" "$f"; fi
  done
}

work=""
cleanup() { [ -z "$work" ] || rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$RACKCACHE_CACHE/images"
# Staging directories of runs that were killed.
find "$RACKCACHE_CACHE/images" -maxdepth 1 -name '.work-*' -mmin +360 -exec rm -rf {} +
work="$(mktemp -d "$RACKCACHE_CACHE/images/.work-XXXXXX")"

# --- binaries ---------------------------------------------------------------
# The Rust build runs beside the Go builds: each leaves a core idle part of
# the time (linking, the last crates), and cold they take minutes each.
log "building rackcache-dataplane (cargo --profile image: release without debug info; cold: ~3 min), beside the Go builds"
(cd "$REPO_ROOT/dataplane" && cargo build --profile image --locked -q -p rackcache-dataplane --bin rackcache-dataplane) >&2 &
cargo_pid=$!
go_tool ociimage; ociimage="$TOOL_BIN"
go_tool pause; pause="$TOOL_BIN"
log "building rackcache-operator (static) and rackcache-csi (cgo)"
CGO_ENABLED=0 go build -C "$REPO_ROOT" -trimpath -ldflags "-s -w" -o "$work/bin/rackcache-operator" ./cmd/operator >&2
CGO_ENABLED=1 go build -C "$REPO_ROOT" -trimpath -ldflags "-s -w" -o "$work/bin/rackcache-csi" ./cmd/rackcache-csi >&2
build_sidecars
wait "$cargo_pid" || die "cargo build --profile image -p rackcache-dataplane failed (see above)"
# The image keeps the symbols (backtraces name functions), no debug info.
objcopy --strip-debug "$REPO_ROOT/dataplane/target/image/rackcache-dataplane" "$work/bin/rackcache-dataplane"

# --- root filesystems; specs: "name|refs (comma-separated)|entrypoint|user|cmd"
specs=()
r="$work/rootfs"

stage_base "$r/rackcache-operator"
install -m 0755 "$work/bin/rackcache-operator" "$r/rackcache-operator/rackcache-operator"
specs+=("rackcache-operator|$REGISTRY/rackcache-operator:$app_version|/rackcache-operator|65532:65532")

stage_base "$r/rackcache-csi" usr
add_elf "$r/rackcache-csi" "$work/bin/rackcache-csi" /usr/local/bin/rackcache-csi
for t in "${CSI_TOOLS[@]}"; do
  if [ -L "$t" ] || ! head -c4 "$t" | grep -q ELF; then copy_into "$r/rackcache-csi" "$t"; else add_elf "$r/rackcache-csi" "$t"; fi
done
add_ceph "$r/rackcache-csi"
copy_into "$r/rackcache-csi" /etc/mke2fs.conf
mkdir -p "$r/rackcache-csi/etc/nvme" "$r/rackcache-csi/run"
touch "$r/rackcache-csi/etc/fstab"
# A minimal /bin/sh (fsck.xfs is a script; exec'ed tools may want one).
cp -p /usr/bin/busybox "$r/rackcache-csi/usr/bin/busybox"
ln -s busybox "$r/rackcache-csi/usr/bin/sh"
specs+=("rackcache-csi|$REGISTRY/rackcache-csi:$app_version|/usr/local/bin/rackcache-csi|")

stage_base "$r/rackcache-dataplane" usr
add_elf "$r/rackcache-dataplane" "$work/bin/rackcache-dataplane" /usr/local/bin/rackcache-dataplane
add_ceph "$r/rackcache-dataplane"
specs+=("rackcache-dataplane|$REGISTRY/rackcache-dataplane:$app_version|/usr/local/bin/rackcache-dataplane|")

mkdir -p "$r/pause"
install -m 0755 "$pause" "$r/pause/pause"
specs+=("pause|$(IFS=,; echo "${PAUSE_IMAGES[*]}")|/pause|65535:65535")

list_sidecars >"$work/sidecars.txt"
while read -r name image bin; do
  stage_base "$r/$name"
  install -m 0755 "$bin" "$r/$name/$name"
  specs+=("$name|$image|/$name|")
done <"$work/sidecars.txt"

# Busybox, tagged with its version (1.35 on bookworm), every applet linked.
busybox_version="$(/usr/bin/busybox | sed -n '1s/^BusyBox v\([0-9]*\.[0-9]*\).*/\1/p')"
[ -n "$busybox_version" ] || die "cannot read /usr/bin/busybox's version"
stage_base "$r/busybox" usr
cp -p /usr/bin/busybox "$r/busybox/usr/bin/busybox"
for a in $(/usr/bin/busybox --list-full); do
  [ -e "$r/busybox/$a" ] || [ -L "$r/busybox/$a" ] || ln -s /usr/bin/busybox "$r/busybox/$a"
done
specs+=("busybox|rackcache.local/busybox:$busybox_version|||sh")

# --- key: every staged file (content, mode, link target) and every spec ------
key="$(
  {
    echo "images.sh $IMAGES_SCRIPT_VERSION $(sha256sum <"$ociimage")"
    printf '%s\n' "${specs[@]}"
    cd "$r"
    find . -printf '%p %y %m %l\n' | LC_ALL=C sort
    find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16
)"
out="$RACKCACHE_CACHE/images/$key"

pack_all() {
  [ -f "$out/images.txt" ] && return 0
  local tmp="$out.tmp" spec name refs entry user cmd ref args
  rm -rf "$tmp" && mkdir -p "$tmp"
  for spec in "${specs[@]}"; do
    IFS='|' read -r name refs entry user cmd <<<"$spec"
    args=(--root "$r/$name" --out "$tmp/$name.tar")
    IFS=',' read -ra refs <<<"$refs"
    for ref in "${refs[@]}"; do args+=(--ref "$ref"); echo "$ref $name.tar" >>"$tmp/images.txt.tmp"; done
    [ -z "$entry" ] || args+=(--entrypoint "$entry")
    [ -z "$user" ] || args+=(--user "$user")
    [ -z "$cmd" ] || args+=(--cmd "$cmd")
    "$ociimage" "${args[@]}" >&2
  done
  local crds
  crds="$(snapshot_crds_dir)"
  mkdir -p "$tmp/snapshot-crds"
  cp "$crds"/snapshot.storage.k8s.io_*.yaml "$tmp/snapshot-crds/"
  mv "$tmp/images.txt.tmp" "$tmp/images.txt"
  rm -rf "$out" && mv "$tmp" "$out"
  prune_old
}

# prune_old keeps the newest KEEP_BUILDS image sets: every clone builds its
# own binaries, so each fresh clone (each CI run) makes a new set.
KEEP_BUILDS=3
prune_old() {
  local old
  # shellcheck disable=SC2012 # names are hex keys
  for old in $(ls -1dt "$RACKCACHE_CACHE"/images/*/ 2>/dev/null | tail -n +$((KEEP_BUILDS + 1))); do
    [ "${old%/}" = "$out" ] || rm -rf "$old"
  done
}

if [ ! -f "$out/images.txt" ]; then
  log "packing ${#specs[@]} images into $out"
  with_lock "images-$key" pack_all
fi
if ! $print_only; then
  log "images in $out:"
  while read -r ref file; do log "  $ref  ($file, $(du -h "$out/$file" | cut -f1))"; done <"$out/images.txt"
  log "import: for f in $out/*.tar; do ctr -n k8s.io images import \"\$f\"; done"
fi
echo "$out"
