#!/usr/bin/env bash
# Builds the upstream CSI sidecars the chart runs (charts/rackcache/values.yaml
# csi.sidecars) as static Go binaries through the Go module proxy, cached in
# $RACKCACHE_CACHE/tools/<name>-<version>/<name>; hack/images.sh packs each
# into an image named as values.yaml names it. No release binary or image is
# reachable from here, and plain `go install MOD/cmd/X@V` fails for most of
# them (replace directives, sumdb misses), so each builds from a wrapper
# module: require the sidecar, copy its replace lines (a local `=> ./dir`
# points at the published module of the same version) and its go.sum, then
# `GOFLAGS=-mod=mod GONOSUMDB=github.com/kubernetes-csi go build`. Cold: 3-5
# min each on two busy cores, ~15 min for all (the snapshotter's two share one
# build).
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

SIDECARS_VERSION=1

# name|module|version|main package (inside the module)|values.yaml key of its
# image ("" when the chart has none: snapshot-controller is cluster-wide).
SIDECARS=(
  "csi-provisioner|github.com/kubernetes-csi/external-provisioner/v5|v5.3.0|cmd/csi-provisioner|provisioner"
  "csi-attacher|github.com/kubernetes-csi/external-attacher/v4|v4.12.0|cmd/csi-attacher|attacher"
  "csi-resizer|github.com/kubernetes-csi/external-resizer/v2|v2.2.0|cmd/csi-resizer|resizer"
  "csi-snapshotter|github.com/kubernetes-csi/external-snapshotter/v8|v8.4.0|cmd/csi-snapshotter|snapshotter"
  "snapshot-controller|github.com/kubernetes-csi/external-snapshotter/v8|v8.4.0|cmd/snapshot-controller|"
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

# build_sidecar NAME MODULE VERSION PKG: the wrapper-module build (see the top).
build_sidecar() {
  local name="$1" mod="$2" version="$3" pkg="$4"
  local dir="$RACKCACHE_CACHE/tools/$name-$version"
  [ -x "$dir/$name" ] && return 0
  local work="$RACKCACHE_CACHE/tools/src/sidecar-$name-$version"
  log "sidecars: building $name $version from $mod (cold: ~2 min)"
  rm -rf "$work" && mkdir -p "$work"
  (
    cd "$work"
    export GONOSUMDB=github.com/kubernetes-csi GOFLAGS=-mod=mod CGO_ENABLED=0
    go mod init "rackcache.io/sidecar-wrapper/$name" >/dev/null 2>&1
    local info gomod srcdir
    info="$(go mod download -json "$mod@$version")"
    gomod="$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' <<<"$info")"
    srcdir="$(sed -n 's/.*"Dir": "\(.*\)".*/\1/p' <<<"$info")"
    [ -f "$gomod" ] || die "could not download $mod@$version: $info"
    {
      echo "require $mod $version"
      # Single-line and block replaces; a local directory becomes the
      # published module of the same path at the sidecar's version.
      awk -v ver="$version" '
        /^replace \($/ { block = 1; next }
        block && /^\)/ { block = 0; next }
        /^replace / { sub(/^replace /, ""); line = $0 }
        block { line = $0 }
        line ~ /=>/ {
          n = split(line, f, /[ \t]+/)
          for (i = 1; i <= n; i++) if (f[i] == "=>") arrow = i
          if (f[arrow + 1] ~ /^\.\.?\//) {
            src = f[1]; if (src == "") src = f[2]
            line = src " => " src " " ver
          }
          print "replace " line
        }
        { line = "" }' "$gomod"
    } >>go.mod
    [ -f "$srcdir/go.sum" ] && cp "$srcdir/go.sum" go.sum
    mkdir -p "$dir"
    go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$dir/$name.tmp" "$mod/$pkg"
    mv "$dir/$name.tmp" "$dir/$name"
  )
}

# build_sidecars builds every sidecar not yet in the cache, one at a time.
build_sidecars() {
  local entry name mod version pkg key
  for entry in "${SIDECARS[@]}"; do
    IFS='|' read -r name mod version pkg key <<<"$entry"
    [ -x "$RACKCACHE_CACHE/tools/$name-$version/$name" ] && continue
    with_lock "tool-$name-$version" build_sidecar "$name" "$mod" "$version" "$pkg"
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
