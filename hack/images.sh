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
# checkout (go build, cargo build --release). The CSI and dataplane images'
# root file systems are Debian 13 (trixie) packages, whole (nvme-cli 2.13
# with NVMe/TCP TLS, Ceph 18's librbd and librados, OpenSSL 3.5), the same
# release as the test guest, downloaded through its package lists
# (hack/debroot.sh) and never installed here; every binary must resolve its
# libraries among them. The operator and sidecars are static; busybox and
# pause come from this host. Each image is one layer packed by
# hack/tools/ociimage (go-containerregistry) with zero timestamps, so the
# same inputs give the same digests; each gets an SPDX SBOM
# (<name>.spdx.json beside its tarball, and /usr/share/rackcache/sbom.spdx.json
# inside): its Debian packages, Go modules and Rust crates, with versions.
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
source "$REPO_ROOT/hack/debroot.sh"
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
# Debian 13 packages of the two images (and the libraries they need).
CSI_PKGS=(nvme-cli e2fsprogs xfsprogs mount util-linux busybox-static librbd1 librados2)
DATAPLANE_PKGS=(librbd1 librados2 libssl3t64 libblkid1)

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
command -v jq >/dev/null || die "jq not found: run hack/deps.sh apt"
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "install ok installed" \
  || die "Debian package busybox-static is missing: run hack/deps.sh apt"

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

# debs_of NAME PKG...: sets DEBS_DIR to the directory with the Debian 13
# packages PKG and the libraries they need, downloaded once per set of
# versions ($RACKCACHE_CACHE/debs/NAME-<key>).
debs_of() {
  local name="$1" pkgs key dir; shift
  mapfile -t pkgs < <(lib_closure "$@")
  key="$(apt-cache "${APT_OPTS[@]}" show --no-all-versions "${pkgs[@]}" 2>/dev/null \
    | awk '/^(Package|Version):/' | sha256sum | cut -c1-16)"
  dir="$RACKCACHE_CACHE/debs/$name-$key"
  if [ ! -f "$dir/.complete" ]; then
    log "downloading $GUEST_SUITE's ${pkgs[*]}"
    rm -rf "$dir"
    # apt's _apt user cannot enter root's cache: download elsewhere first.
    local dl
    dl="$(mktemp -d)"
    download_debs "$dl" "${pkgs[@]}"
    mkdir -p "$dir" && mv "$dl"/*.deb "$dir/" && rmdir "$dl"
    touch "$dir/.complete"
  fi
  DEBS_DIR="$dir"
}

# stage_debs ROOT DEBDIR: the packages' files into an image root (after
# stage_base ROOT usr): /usr and /etc, without documentation.
stage_debs() {
  local root="$1" debs="$2" unpacked
  unpacked="$work/debs-$(basename "$1")"
  unpack_debs "$unpacked" "$debs"/*.deb
  rm -rf "$unpacked"/usr/share/{doc,man,info,locale,lintian,bug,bash-completion}
  cp -a "$unpacked/usr/." "$root/usr/"
  if [ -d "$unpacked/etc" ]; then cp -a "$unpacked/etc/." "$root/etc/"; fi
}

# check_ceph ROOT: librados and its private libceph-common resolve in the
# image, and so do the plugins it dlopens from $CEPH_PLUGIN_DIR where a
# package ships them (Debian 12's librados2 ships compressors and crypto;
# 13's does not: the client uses neither unless on-wire compression is
# turned on).
check_ceph() {
  local root="$1" f
  check_libs "$root" "$CEPH_PLUGIN_DIR/libceph-common.so.2"
  for f in "$root$CEPH_PLUGIN_DIR"/compressor/* "$root$CEPH_PLUGIN_DIR"/crypto/*; do
    [ -e "$f" ] || continue
    [ -L "$f" ] || check_libs "$root" "${f#"$root"}"
  done
}

# sbom ROOT NAME DEBDIR BIN...: an SPDX 2.3 document of image NAME: the
# Debian packages in DEBDIR (none: ""), the Go modules of the Go binaries
# among BIN (go version -m) and, for rackcache-dataplane, the crates of its
# build (cargo tree). Written to $work/NAME.spdx.json and into ROOT at
# /usr/share/rackcache/sbom.spdx.json.
sbom() {
  local root="$1" name="$2" debs="$3" bin deb created; shift 3
  created="$(git -C "$REPO_ROOT" log -1 --format=%cI 2>/dev/null || echo 1970-01-01T00:00:00Z)"
  {
    if [ -n "$debs" ]; then
      for deb in "$debs"/*.deb; do
        dpkg-deb --show --showformat='deb ${Package} ${Version}\n' "$deb"
      done
    fi
    for bin in "$@"; do
      case "$(basename "$bin")" in
        busybox)
          dpkg-query -W -f='deb ${Package} ${Version}\n' busybox-static ;;
        rackcache-dataplane)
          (cd "$REPO_ROOT/dataplane" && cargo tree -q --locked -p rackcache-dataplane -e normal --prefix none) \
            | awk '$2 ~ /^v[0-9]/ { sub(/^v/, "", $2); print "cargo " $1 " " $2 }' ;;
        *)
          go version -m "$bin" | awk '$1 == "dep" || $1 == "mod" { print "golang " $2 " " $3 }' ;;
      esac
    done
  } | LC_ALL=C sort -u | jq -R -s --arg name "$name" --arg created "$created" --arg suite "$GUEST_SUITE" '
    def purl($k; $n; $v):
      if $k == "deb" then "pkg:deb/debian/\($n)@\($v)?arch=amd64&distro=\($suite)"
      elif $k == "golang" then "pkg:golang/\($n)@\($v)"
      else "pkg:cargo/\($n)@\($v)" end;
    [split("\n")[] | select(length > 0) | split(" ")] as $rows |
    {
      spdxVersion: "SPDX-2.3", dataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
      name: $name, documentNamespace: "https://rackcache.io/spdx/\($name)",
      creationInfo: {created: $created, creators: ["Tool: rackcache hack/images.sh"]},
      packages: [$rows | to_entries[] | {
        name: .value[1], SPDXID: "SPDXRef-Package-\(.key)", versionInfo: .value[2],
        downloadLocation: "NOASSERTION", filesAnalyzed: false,
        externalRefs: [{referenceCategory: "PACKAGE-MANAGER", referenceType: "purl",
                        referenceLocator: purl(.value[0]; .value[1]; .value[2])}]
      }]
    }' >"$work/$name.spdx.json"
  install -D -m 0644 "$work/$name.spdx.json" "$root/usr/share/rackcache/sbom.spdx.json"
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
sbom "$r/rackcache-operator" rackcache-operator "" "$work/bin/rackcache-operator"
specs+=("rackcache-operator|$REGISTRY/rackcache-operator:$app_version|/rackcache-operator|65532:65532")

guest_apt
# The binaries are built on this host (Debian 12: glibc 2.36); trixie's
# newer glibc and libraries keep their ABI (librbd.so.1, librados.so.2).
debs_of csi "${CSI_PKGS[@]}"; csi_debs="$DEBS_DIR"
stage_base "$r/rackcache-csi" usr
stage_debs "$r/rackcache-csi" "$csi_debs"
install -D -m 0755 "$work/bin/rackcache-csi" "$r/rackcache-csi/usr/local/bin/rackcache-csi"
check_libs "$r/rackcache-csi" /usr/local/bin/rackcache-csi
for t in "${CSI_TOOLS[@]}"; do
  [ -e "$r/rackcache-csi$t" ] || die "$t is in no package of the CSI image (${CSI_PKGS[*]})"
  if [ ! -L "$r/rackcache-csi$t" ] && head -c4 "$r/rackcache-csi$t" | grep -q ELF; then check_libs "$r/rackcache-csi" "$t"; fi
done
check_ceph "$r/rackcache-csi"
mkdir -p "$r/rackcache-csi/etc/nvme" "$r/rackcache-csi/run"
touch "$r/rackcache-csi/etc/fstab"
# A minimal /bin/sh (fsck.xfs is a script; exec'ed tools may want one).
ln -s busybox "$r/rackcache-csi/usr/bin/sh"
sbom "$r/rackcache-csi" rackcache-csi "$csi_debs" "$work/bin/rackcache-csi"
specs+=("rackcache-csi|$REGISTRY/rackcache-csi:$app_version|/usr/local/bin/rackcache-csi|")

debs_of dataplane "${DATAPLANE_PKGS[@]}"; dataplane_debs="$DEBS_DIR"
stage_base "$r/rackcache-dataplane" usr
stage_debs "$r/rackcache-dataplane" "$dataplane_debs"
install -D -m 0755 "$work/bin/rackcache-dataplane" "$r/rackcache-dataplane/usr/local/bin/rackcache-dataplane"
check_libs "$r/rackcache-dataplane" /usr/local/bin/rackcache-dataplane
check_ceph "$r/rackcache-dataplane"
sbom "$r/rackcache-dataplane" rackcache-dataplane "$dataplane_debs" "$REPO_ROOT/dataplane/target/image/rackcache-dataplane"
specs+=("rackcache-dataplane|$REGISTRY/rackcache-dataplane:$app_version|/usr/local/bin/rackcache-dataplane|")

mkdir -p "$r/pause"
install -m 0755 "$pause" "$r/pause/pause"
sbom "$r/pause" pause "" "$pause"
specs+=("pause|$(IFS=,; echo "${PAUSE_IMAGES[*]}")|/pause|65535:65535")

list_sidecars >"$work/sidecars.txt"
while read -r name image bin; do
  stage_base "$r/$name"
  install -m 0755 "$bin" "$r/$name/$name"
  sbom "$r/$name" "$name" "" "$bin"
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
sbom "$r/busybox" busybox "" /usr/bin/busybox
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
    cp "$work/$name.spdx.json" "$tmp/$name.spdx.json"
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
