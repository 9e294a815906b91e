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
#   go-tools  csi-sanity, golangci-lint (the ginkgo suites run under `go
#             test`: no ginkgo CLI is needed); and kubectl, helm,
#             controller-gen, kustomize from one module (hack/tools/kube)
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
  # nvmf-tgt's admission test cuts a loopback port with iptables (a real
  # partition for TCP keep-alive)
  iptables
  # build helpers; jq reads cargo's build messages (hack/rust-tests.sh)
  pkg-config jq
  # OpenSSL: the NVMe/TCP secure channel (TLS with PSKs) of the dataplane
  libssl-dev
  # libblkid: the dataplane probes a cache device for signatures before it
  # formats it; sgdisk makes the partition table its test probes
  libblkid-dev gdisk
  # the CSI image's node tools (hack/images.sh copies them with their libraries)
  nvme-cli e2fsprogs xfsprogs
  # the font of rackcache-sim --plot's charts
  fonts-dejavu-core
  # headless browser of the operator dashboard's test (test/dashboard)
  chromium
  # the local four-node cluster (hack/cluster.sh): the host node's container
  # runtime and CNI plugins, the guest node's root file system, certificates
  containerd runc containernetworking-plugins debootstrap openssl
)

SPDK_PY_VERSION="26.9"
LIBCACHESIM_VERSION="0.3.5"
PROMETHEUS_CLIENT_VERSION="0.21.1"

# name|package@version[|static]; static tools are built without cgo (no
# shared libraries), into a cache directory of their own.
GO_TOOLS=(
  # static: it also runs inside the qemu guest (test/csi)
  "csi-sanity|github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@v5.4.0|static"
  "golangci-lint|github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0"
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
      # -s -w: no symbol table or DWARF (nobody debugs these tools here);
      # writing them is a good part of linking a large binary.
      with_lock "tool-$name-$version$suffix" env GOBIN="$dir" CGO_ENABLED="$cgo" go install -ldflags "-s -w" "$pkg"
    fi
    link_into_bin "$name" "$dir/$name"
  done
  install_kube_tools
}

# kubectl, helm, controller-gen and kustomize are built by one `go build` of
# one module of ours (hack/tools/kube), so the Kubernetes client libraries
# they all use (client-go, api, apimachinery, cli-runtime, kustomize's api)
# are one release and compile once, not once per tool. kubectl has no
# `go install`-able main of its own (it lives in k8s.io/kubernetes), hence
# the module's cmd/kubectl; the three others are its go.mod's `tool`s. The
# cache key is the module's files, so a changed pin rebuilds all four.
KUBE_TOOLS=(kubectl helm controller-gen kustomize)

install_kube_tools() {
  local mod="$REPO_ROOT/hack/tools/kube" key dir t missing=0
  key="$(cat "$mod/go.mod" "$mod/go.sum" "$mod"/cmd/kubectl/*.go | sha256sum | cut -c1-12)"
  dir="$RACKCACHE_CACHE/tools/kube-$key"
  for t in "${KUBE_TOOLS[@]}"; do [ -x "$dir/$t" ] || missing=1; done
  if [ "$missing" = 1 ]; then
    local kubectl helm cgen kustomize
    kubectl="$(pinned "$mod" k8s.io/kubectl)" helm="$(pinned "$mod" helm.sh/helm/v3)"
    cgen="$(pinned "$mod" sigs.k8s.io/controller-tools)" kustomize="$(pinned "$mod" sigs.k8s.io/kustomize/kustomize/v5)"
    log "go-tools: building kubectl $kubectl, helm $helm, controller-gen $cgen, kustomize $kustomize (hack/tools/kube)"
    # Each tool reports its release as its upstream build stamps it;
    # `kubectl version` says v1.X.Y for k8s.io/kubectl v0.X.Y.
    local release="v1.${kubectl#v0.}" pkg ldflags="-s -w"
    for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
      ldflags+=" -X $pkg.gitVersion=$release -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(cut -d. -f2 <<<"$kubectl")"
    done
    ldflags+=" -X helm.sh/helm/v3/internal/version.version=$helm"
    ldflags+=" -X sigs.k8s.io/controller-tools/pkg/version.version=$cgen"
    ldflags+=" -X sigs.k8s.io/kustomize/api/provenance.version=kustomize/$kustomize"
    # -C: the module's own go.mod, never the project's.
    with_lock "tool-kube-$key" go build -C "$mod" -ldflags "$ldflags" -o "$dir/" ./cmd/kubectl tool
  fi
  for t in "${KUBE_TOOLS[@]}"; do link_into_bin "$t" "$dir/$t"; done
}

# pinned MODULE_DIR PATH: the version MODULE_DIR's go.mod requires of PATH.
pinned() {
  local v
  v="$(sed -n "s#^\s*$2 \(v[^ ]*\).*#\1#p" "$1/go.mod")"
  [ -n "$v" ] || die "no $2 version pinned in $1/go.mod"
  echo "$v"
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
