#!/usr/bin/env bash
# Installs what rackcache's build and tests need on a fresh Debian bookworm
# machine, idempotently. Built tools are cached outside the clone in
# $RACKCACHE_CACHE (keyed by version) and linked into bin/.
#
# Usage: hack/deps.sh [all|apt|python|go-tools|rust|cargo-fuzz] [--help]
#   apt       Debian packages: Ceph daemons and client libraries, qemu,
#             busybox-static, cpio, kmod, socat, ...
#   python    a venv (bin/venv) with SPDK's official JSON-RPC client (spdk)
#             libCacheSim (libcachesim: the simulator benchmark's baseline and
#             rackcache-sim --compare-peers) and
#             prometheus-client (its parser checks our /metrics output)
#   go-tools  controller-gen, ginkgo, csi-sanity, helm, golangci-lint, kustomize,
#             kubectl (hack/tools/kubectl, its own module)
#   rust      checks rustfmt and clippy (installed with the toolchain)
#   cargo-fuzz  cargo-fuzz, built from crates.io into the cache
#   all       all of the above (default)
source "$(dirname "$0")/lib.sh"


APT_PACKAGES=(
  # Ceph (one-node cluster for tests) and librbd/librados for go-ceph and the dataplane
  ceph-mon ceph-osd ceph-mgr ceph-common librbd-dev librados-dev python3-rbd python3-rados
  # qemu guest with the stock kernel's NVMe/TCP initiator
  qemu-system-x86 busybox-static cpio kmod socat
  # the demo reads the dataplane's /metrics
  curl
  # promtool checks and unit-tests the chart's alerting rules
  prometheus
  # build helpers
  pkg-config
  # the CSI image's node tools (hack/images.sh copies them with their libraries)
  nvme-cli e2fsprogs xfsprogs
  # the font of rackcache-sim --plot's charts
  fonts-dejavu-core
  # headless browser of the operator dashboard's test (test/dashboard)
  chromium
  # the local two-node cluster (hack/cluster.sh): the host node's container
  # runtime and CNI plugins, the guest node's root file system, certificates
  containerd runc containernetworking-plugins debootstrap openssl
)

SPDK_PY_VERSION="26.9"
LIBCACHESIM_VERSION="0.3.5"
PROMETHEUS_CLIENT_VERSION="0.21.1"

# name|package@version[|static]; static tools are built without cgo (no
# shared libraries), into a cache directory of their own.
GO_TOOLS=(
  "controller-gen|sigs.k8s.io/controller-tools/cmd/controller-gen@v0.19.0"
  "ginkgo|github.com/onsi/ginkgo/v2/ginkgo@v2.34.0"
  # static: it also runs inside the qemu guest (test/csi)
  "csi-sanity|github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@v5.4.0|static"
  "kustomize|sigs.k8s.io/kustomize/kustomize/v5@v5.8.2"
  "golangci-lint|github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0"
  "helm|helm.sh/helm/v3/cmd/helm@v3.22.0"
)

install_apt() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    [[ "$p" == \#* ]] && continue
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    log "apt: all ${#APT_PACKAGES[@]} packages present"
    return 0
  fi
  log "apt: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

install_python() {
  local pins=("spdk==$SPDK_PY_VERSION" "libcachesim==$LIBCACHESIM_VERSION" "prometheus-client==$PROMETHEUS_CLIENT_VERSION")
  # The venv's name carries every pin, so changing one builds a new venv.
  local key
  key="$(printf '%s\n' "${pins[@]}" | sha256sum | cut -c1-12)"
  local venv="$RACKCACHE_CACHE/venv/py-$key"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import spdk.rpc, libcachesim, prometheus_client' 2>/dev/null; then
    log "python: creating venv $venv with ${pins[*]}"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "${pins[@]}"
  fi
  link_into_bin venv "$venv"
}

install_go_tools() {
  local entry name pkg version dir cgo suffix
  for entry in "${GO_TOOLS[@]}"; do
    IFS='|' read -r name pkg suffix <<<"$entry"
    version="${pkg##*@}"; cgo=1
    [ "$suffix" = static ] && cgo=0 && suffix="-static"
    dir="$RACKCACHE_CACHE/tools/$name-$version$suffix"
    if [ ! -x "$dir/$name" ]; then
      log "go-tools: building $name $version$suffix"
      with_lock "tool-$name-$version$suffix" env GOBIN="$dir" CGO_ENABLED="$cgo" go install "$pkg"
    fi
    link_into_bin "$name" "$dir/$name"
  done
  install_kubectl
}

# kubectl has no prebuilt download reachable here and no `go install`-able
# main package of its own: hack/tools/kubectl is a tiny module whose go.mod
# pins k8s.io/kubectl, built into the cache keyed by that version.
install_kubectl() {
  local mod="$REPO_ROOT/hack/tools/kubectl" version dir
  version="$(sed -n 's#^\s*k8s.io/kubectl \(v[^ ]*\).*#\1#p' "$mod/go.mod")"
  [ -n "$version" ] || die "no k8s.io/kubectl version pinned in $mod/go.mod"
  dir="$RACKCACHE_CACHE/tools/kubectl-$version"
  if [ ! -x "$dir/kubectl" ]; then
    log "go-tools: building kubectl $version"
    # -C: the module's own go.mod, never the project's. The -X flags give
    # `kubectl version` the release it is (v0.X.Y is Kubernetes 1.X.Y).
    local release="v1.${version#v0.}" pkg ldflags=""
    for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
      ldflags+=" -X $pkg.gitVersion=$release -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(cut -d. -f2 <<<"$version")"
    done
    with_lock "tool-kubectl-$version" go build -C "$mod" -ldflags "$ldflags" -o "$dir/kubectl" .
  fi
  link_into_bin kubectl "$dir/kubectl"
}

CARGO_FUZZ_VERSION="0.12.0"

install_cargo_fuzz() {
  local dir="$RACKCACHE_CACHE/tools/cargo-fuzz-$CARGO_FUZZ_VERSION"
  if [ ! -x "$dir/bin/cargo-fuzz" ]; then
    log "cargo-fuzz: building $CARGO_FUZZ_VERSION"
    with_lock "tool-cargo-fuzz-$CARGO_FUZZ_VERSION" \
      cargo install --quiet --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION" --root "$dir"
  fi
  link_into_bin cargo-fuzz "$dir/bin/cargo-fuzz"
}

check_rust() {
  command -v cargo >/dev/null || die "cargo not found: install Rust with rustup first"
  cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
  cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
  log "rust: $(cargo --version), rustfmt and clippy present"
}

what="${1:-all}"
case "$what" in
  --help|-h) usage ;;
  apt) install_apt ;;
  python) install_python ;;
  go-tools) install_go_tools ;;
  rust) check_rust ;;
  cargo-fuzz) install_cargo_fuzz ;;
  all) install_apt; install_python; install_go_tools; check_rust; install_cargo_fuzz ;;
  *) die "unknown step: $what (see --help)" ;;
esac
