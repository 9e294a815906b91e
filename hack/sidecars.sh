#!/usr/bin/env bash
# Builds the upstream CSI sidecars the chart runs (charts/rackcache/values.yaml
# csi.sidecars) as static Go binaries through the Go module proxy, cached in
# $RACKCACHE_CACHE/tools/<name>-<version>/<name>; hack/images.sh packs each
# into an image named as values.yaml names it. No release binary or image is
# reachable from here, and plain `go install MOD/cmd/X@V` fails for most of
# them (replace directives, sumdb misses), so they build from one wrapper
# module that requires every sidecar, carries their replace lines (a local
# `=> ./dir` points at the published module of the same version) and their
# go.sum lines, and builds them all in one `go build`. The versions are
# chosen to share their Kubernetes libraries (k8s.io/* v0.36.1), so
# client-go and the API types compile once for all of them, not once each:
# what made the sidecars the slowest step of a cold set-up.
#
# csi-node-driver-registrar cannot be built: the module proxy refuses every
# version of github.com/kubernetes-csi/node-driver-registrar (403), which is
# why rackcache-csi registers with the kubelet itself.
#
# Usage: hack/sidecars.sh [--list|--crds|--help]
#   (none), --list  build every sidecar (nothing is rebuilt when cached),
#            then print "name image binary" for each
#   --crds   print the directory holding the VolumeSnapshot CRDs (of the
#            external-snapshotter client module the snapshotter pins)
# Sourced (by hack/images.sh), it only defines the functions.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
shopt -s inherit_errexit

SIDECARS_VERSION=2

# name|module|version|main package (inside the module)|values.yaml key of its
# image ("" when the chart has none: snapshot-controller is cluster-wide).
SIDECARS=(
  "csi-provisioner|github.com/kubernetes-csi/external-provisioner/v6|v6.3.0|cmd/csi-provisioner|provisioner"
  "csi-attacher|github.com/kubernetes-csi/external-attacher/v4|v4.12.0|cmd/csi-attacher|attacher"
  "csi-resizer|github.com/kubernetes-csi/external-resizer/v2|v2.2.0|cmd/csi-resizer|resizer"
  "csi-snapshotter|github.com/kubernetes-csi/external-snapshotter/v8|v8.6.0|cmd/csi-snapshotter|snapshotter"
  "snapshot-controller|github.com/kubernetes-csi/external-snapshotter/v8|v8.6.0|cmd/snapshot-controller|"
)
SNAPSHOT_CLIENT_MODULE="github.com/kubernetes-csi/external-snapshotter/client/v8"
SIDECAR_REGISTRY="registry.k8s.io/sig-storage"

# sidecar_image NAME KEY VERSION sets SIDECAR_IMAGE to the image the chart
# names for that sidecar, which must carry the version built here.
sidecar_image() {
  local name="$1" key="$2" version="$3"
  SIDECAR_IMAGE="$SIDECAR_REGISTRY/$name:$version"
  [ -n "$key" ] || return 0
  SIDECAR_IMAGE="$(awk -v key="$key" '
    /^  sidecars:/ { in_sc = 1; next }
    in_sc && /^  [^ ]/ { in_sc = 0 }
    in_sc && $1 == key ":" { print $2; exit }' "$REPO_ROOT/charts/rackcache/values.yaml")"
  [ -n "$SIDECAR_IMAGE" ] || die "charts/rackcache/values.yaml names no csi.sidecars.$key image"
  [ "${SIDECAR_IMAGE##*:}" = "$version" ] || die "values.yaml's csi.sidecars.$key is $SIDECAR_IMAGE, but hack/sidecars.sh builds $name $version: update SIDECARS"
}

# sidecar_replaces MODULE VERSION GOMOD prints GOMOD's replace lines as
# "old => new version" lines, a local directory turned into the published
# module of the same path at VERSION.
sidecar_replaces() {
  awk -v ver="$2" '
    /^replace \($/ { block = 1; next }
    block && /^\)/ { block = 0; next }
    /^replace / { sub(/^replace /, ""); line = $0 }
    block { line = $0 }
    line ~ /=>/ {
      n = split(line, f, /[ \t]+/)
      for (i = 1; i <= n; i++) if (f[i] == "=>") arrow = i
      src = f[1]; if (src == "") src = f[2]
      if (f[arrow + 1] ~ /^\.\.?\//) print src " => " src " " ver
      else print src " => " f[arrow + 1] " " f[arrow + 2]
    }
    { line = "" }' "$3"
}

# build_all_sidecars: the one wrapper module and the one `go build` (see the
# top); two sidecars that replace one module differently stop the build.
build_all_sidecars() {
  local entry name mod version pkg key info gomod srcdir
  local work="$RACKCACHE_CACHE/tools/src/sidecars-$SIDECARS_VERSION"
  local out="$work/bin" pkgs=() ldflags=() seen=" "
  log "sidecars: building ${#SIDECARS[@]} sidecars in one module (cold: ~5 min)"
  rm -rf "$work" && mkdir -p "$out"
  (
    cd "$work"
    export GONOSUMDB=github.com/kubernetes-csi GOFLAGS=-mod=mod CGO_ENABLED=0
    go mod init rackcache.io/sidecar-wrapper >/dev/null 2>&1
    : >replaces.txt
    for entry in "${SIDECARS[@]}"; do
      IFS='|' read -r name mod version pkg key <<<"$entry"
      pkgs+=("$mod/$pkg")
      ldflags+=(-ldflags "$mod/$pkg=-s -w -X main.version=$version")
      case "$seen" in *" $mod@$version "*) continue ;; esac
      seen+="$mod@$version "
      info="$(go mod download -json "$mod@$version")"
      gomod="$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' <<<"$info")"
      srcdir="$(sed -n 's/.*"Dir": "\(.*\)".*/\1/p' <<<"$info")"
      [ -f "$gomod" ] || die "could not download $mod@$version: $info"
      echo "require $mod $version" >>go.mod
      sidecar_replaces "$mod" "$version" "$gomod" >>replaces.txt
      [ -f "$srcdir/go.sum" ] && cat "$srcdir/go.sum" >>go.sum.all
    done
    local conflict
    conflict="$(LC_ALL=C sort -u replaces.txt | awk '{ n[$1]++ } n[$1] == 2 { print $1 }')"
    [ -z "$conflict" ] || die "sidecars replace these modules differently: $conflict (pick versions that agree)"
    LC_ALL=C sort -u replaces.txt | sed 's/^/replace /' >>go.mod
    LC_ALL=C sort -u go.sum.all >go.sum
    go build -trimpath "${ldflags[@]}" -o "$out/" "${pkgs[@]}"
  )
  for entry in "${SIDECARS[@]}"; do
    IFS='|' read -r name mod version pkg key <<<"$entry"
    [ -x "$out/$(basename "$pkg")" ] || die "go build made no $(basename "$pkg") in $out"
    mkdir -p "$RACKCACHE_CACHE/tools/$name-$version"
    cp "$out/$(basename "$pkg")" "$RACKCACHE_CACHE/tools/$name-$version/$name.tmp"
    mv "$RACKCACHE_CACHE/tools/$name-$version/$name.tmp" "$RACKCACHE_CACHE/tools/$name-$version/$name"
  done
}

# build_sidecars builds the sidecars when one is not yet in the cache.
build_sidecars() {
  local entry name mod version pkg key
  for entry in "${SIDECARS[@]}"; do
    IFS='|' read -r name mod version pkg key <<<"$entry"
    [ -x "$RACKCACHE_CACHE/tools/$name-$version/$name" ] && continue
    with_lock "sidecars-$SIDECARS_VERSION" build_all_sidecars
    return 0
  done
}

# list_sidecars prints "name image binary" lines (after build_sidecars).
list_sidecars() {
  local entry name mod version pkg key
  for entry in "${SIDECARS[@]}"; do
    IFS='|' read -r name mod version pkg key <<<"$entry"
    sidecar_image "$name" "$key" "$version"
    echo "$name $SIDECAR_IMAGE $RACKCACHE_CACHE/tools/$name-$version/$name"
  done
}

# snapshot_crds_dir prints the directory of the VolumeSnapshot CRDs of the
# snapshot client module at the snapshotter's version.
snapshot_crds_dir() {
  local version info dir
  version="$(printf '%s\n' "${SIDECARS[@]}" | awk -F'|' '$1 == "csi-snapshotter" { print $3 }')"
  info="$(GONOSUMDB=github.com/kubernetes-csi GOFLAGS=-mod=mod go mod download -json "$SNAPSHOT_CLIENT_MODULE@$version")"
  dir="$(sed -n 's/.*"Dir": "\(.*\)".*/\1/p' <<<"$info")/config/crd"
  ls "$dir"/snapshot.storage.k8s.io_*.yaml >/dev/null 2>&1 || die "no VolumeSnapshot CRDs in $SNAPSHOT_CLIENT_MODULE@$version ($dir)"
  echo "$dir"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
    --help|-h) usage ;;
    --crds) snapshot_crds_dir ;;
    ""|--list) build_sidecars; list_sidecars ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
fi
