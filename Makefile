# rackcache: kubebuilder-conventional targets. `make help` lists them.
#
# Every target that needs a tool installs it first through hack/ (cached
# outside the clone in $(RACKCACHE_CACHE), keyed by version), so `make test`
# and `make demo` work on a fresh Debian machine.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

export GOTOOLCHAIN := local
export RACKCACHE_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/rackcache
# The shared trace samples (hack/traces-dir.sh says where it looks).
export RACKCACHE_TRACES ?= $(shell hack/traces-dir.sh)
export PATH := $(CURDIR)/bin:$(PATH)
# -trimpath everywhere: the images are built with it (reproducible
# binaries), and with the same flags `go vet`, golangci-lint and the tests
# reuse the packages the CSI driver's image build compiled (cold: the
# Kubernetes and gRPC libraries compile once instead of twice).
export GOFLAGS := -trimpath $(filter-out -trimpath,$(GOFLAGS))

K8S_VERSION ?= 1.34.4
DATAPLANE := dataplane
CARGO ?= cargo
# -s -w: test binaries without a symbol table or DWARF link faster; stack
# traces still name functions and lines (the runtime's own tables stay).
GO_TEST_FLAGS ?= -count=1 -timeout 30m -ldflags='-s -w'
# Go packages holding code to build and vet (tests included).
GO_PACKAGES := ./...
# The e2e suite runs against a cluster (hack/e2e.sh), not in test-go.
# The longest packages come first: `go test` starts packages in the order
# given, and a long one started last would run alone at the end.
GO_TEST_SLOW := $(addprefix github.com/rackcache/rackcache/,test/dataplane test/csi controllers/cachedvolume test/operator test/infra)
GO_TEST_PACKAGES = $(GO_TEST_SLOW) $(filter-out $(GO_TEST_SLOW),$(shell go list ./... | grep -v /test/e2e))
# Two test binaries at a time on two cores. Three kept the CPU busier (the
# guest and Ceph tests wait a good part of their time), but with the TLS
# and DH-HMAC-CHAP guest specs three starved the TCG guests: a kernel
# host's FFDHE-8192 outlasted the target's 30 s authentication timeout and
# a connect failed (a fresh CI=true run, test/operator and test/dataplane).
GO_TEST_PARALLEL ?= 2

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} \
	  /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## Install apt packages, the Python venv (spdk), pinned Go tools; check rustfmt/clippy.
	hack/deps.sh all

.PHONY: envtest-assets
envtest-assets: ## Build kube-apiserver and etcd from source for envtest (cached).
	hack/envtest-assets.sh

.PHONY: guest-image
guest-image: ## Build the qemu guest's kernel + initramfs with nvme-cli (cached).
	hack/guest/build.sh

.PHONY: images
images: ## Build the container images as tarballs without Docker (hack/images.sh; cached).
	hack/images.sh

.PHONY: cluster-assets
cluster-assets: ## Build kube-apiserver, etcd, kubelet, kube-scheduler and kube-controller-manager from source (cached).
	hack/cluster/assets.sh

.PHONY: setup
setup: ## Every set-up step make test needs, in two lanes side by side, timed (hack/setup.sh).
	hack/setup.sh

##@ Development

.PHONY: generate
generate: ## Generate DeepCopy code for the API types (controller-gen).
	@if ls api/*/*.go >/dev/null 2>&1; then \
	  hack/deps.sh go-tools && controller-gen object paths="./api/..."; \
	else echo "generate: no API types under api/ yet, nothing to generate"; fi

.PHONY: manifests
manifests: ## Generate CRDs and RBAC into config/ (controller-gen), and copy them into the Helm chart.
	@if ls api/*/*.go >/dev/null 2>&1; then \
	  hack/deps.sh go-tools && controller-gen crd rbac:roleName=rackcache-operator \
	    paths="./api/...;./controllers/..." output:crd:artifacts:config=config/crd/bases; \
	else echo "manifests: no API types under api/ yet, nothing to generate"; fi
	hack/chart-sync.sh

.PHONY: fmt
fmt: ## Format Go (gofmt) and Rust (rustfmt) code in place.
	gofmt -w $$(git ls-files -co --exclude-standard '*.go')
	cd $(DATAPLANE) && $(CARGO) fmt --all
	cd $(DATAPLANE)/nvmf/fuzz && $(CARGO) fmt
	cd $(DATAPLANE)/daemon/fuzz && $(CARGO) fmt
	cd $(DATAPLANE)/cache/fuzz && $(CARGO) fmt

.PHONY: fmt-check
fmt-check: fmt-check-go fmt-check-rust ## Fail when Go or Rust code is not formatted.

.PHONY: fmt-check-go
fmt-check-go: ## Fail when Go code is not gofmt'ed.
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

.PHONY: fmt-check-rust
fmt-check-rust: ## Fail when Rust code is not rustfmt'ed.
	cd $(DATAPLANE) && $(CARGO) fmt --all --check
	cd $(DATAPLANE)/nvmf/fuzz && $(CARGO) fmt --check
	cd $(DATAPLANE)/daemon/fuzz && $(CARGO) fmt --check
	cd $(DATAPLANE)/cache/fuzz && $(CARGO) fmt --check

.PHONY: vet
vet: ## go vet.
	go vet $(GO_PACKAGES)

.PHONY: lint
lint: lint-go lint-rust ## golangci-lint, cargo clippy (-D warnings) and bash -n on hack/.

.PHONY: lint-go
lint-go: ## golangci-lint and bash -n on hack/.
	hack/deps.sh go-tools
	golangci-lint run $(GO_PACKAGES)
	@for f in $$(git ls-files -co --exclude-standard 'hack/*.sh' 'hack/**/*.sh' .ci/run); do bash -n "$$f"; done

.PHONY: lint-rust
lint-rust: ## cargo clippy -D warnings on the dataplane workspace.
	cd $(DATAPLANE) && $(CARGO) clippy --workspace --all-targets -- -D warnings

.PHONY: verify
verify: verify-go verify-rust ## Everything static: formatting, vet, linters, generated code.

.PHONY: verify-go
verify-go: fmt-check-go vet lint-go verify-generated ## The Go side of verify.

.PHONY: verify-rust
verify-rust: fmt-check-rust lint-rust ## The Rust side of verify.

.PHONY: verify-generated
verify-generated: ## Fail when `make generate manifests` would change the generated files on disk.
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	  gen() { find api config/crd config/rbac charts/rackcache/crds charts/rackcache/files -type f \( -name 'zz_generated.*.go' -o -path 'config/crd/bases/*' -o -path 'config/rbac/role.yaml' -o -path 'charts/rackcache/crds/*' -o -path 'charts/rackcache/files/*' \) 2>/dev/null | sort; }; \
	  for f in $$(gen); do mkdir -p "$$tmp/before/$$(dirname $$f)"; cp "$$f" "$$tmp/before/$$f"; done; \
	  $(MAKE) --no-print-directory generate manifests >/dev/null; \
	  for f in $$(gen); do mkdir -p "$$tmp/after/$$(dirname $$f)"; cp "$$f" "$$tmp/after/$$f"; done; \
	  mkdir -p "$$tmp/before" "$$tmp/after"; \
	  if ! diff -ru "$$tmp/before" "$$tmp/after"; then \
	    echo "generated files were stale (now regenerated): review and commit them"; exit 1; fi

##@ Build

.PHONY: build
build: operator ## Build the Go packages, bin/rackcache-operator and the dataplane workspace (release).
	go build $(GO_PACKAGES)
	cd $(DATAPLANE) && $(CARGO) build --workspace --release

.PHONY: operator
operator: ## Build the operator binary into bin/rackcache-operator.
	go build -o bin/rackcache-operator ./cmd/operator

##@ Test

.PHONY: test
test: ## Everything CI runs (the set-up included), each step timed (hack/steps.sh).
	MAKE="$(MAKE)" hack/steps.sh setup verify test-rust test-fuzz test-go test-e2e-smoke

.PHONY: test-go
test-go: ## Go tests: unit, envtest, real Ceph, the qemu guest.
	KUBEBUILDER_ASSETS=$(RACKCACHE_CACHE)/k8s/$(K8S_VERSION) go test -p $(GO_TEST_PARALLEL) $(GO_TEST_FLAGS) $(GO_TEST_PACKAGES)

.PHONY: test-rust
test-rust: ## Rust tests of the dataplane workspace (cargo test --workspace, two test binaries at a time: hack/rust-tests.sh).
	CARGO="$(CARGO)" hack/rust-tests.sh

.PHONY: test-fuzz
test-fuzz: ## Fuzz the NVMe/TCP codec, authentication, JSON-RPC and a cached volume's I/O briefly (20 s per target, fixed seed).
	hack/fuzz.sh 20

.PHONY: fuzz
fuzz: ## Fuzz longer: FUZZ_SECONDS per target (default 300).
	hack/fuzz.sh $(or $(FUZZ_SECONDS),300)

.PHONY: test-e2e-smoke
test-e2e-smoke: ## The e2e specs labelled smoke on the local four-node cluster (hack/e2e.sh; up and down).
	hack/e2e.sh smoke

.PHONY: test-e2e
test-e2e: deps images cluster-assets ## The whole e2e suite on the local four-node cluster (hack/e2e.sh).
	hack/e2e.sh full

.PHONY: cluster-up
cluster-up: deps images cluster-assets ## Start the local four-node cluster (hack/cluster.sh up) and print its settings.
	hack/cluster.sh up

.PHONY: cluster-down
cluster-down: ## Stop the local cluster: no process, mount or file left.
	hack/cluster.sh down

.PHONY: soak
soak: deps guest-image ## Soaks: SOAK_CYCLES (default 20) kill -9 cycles of a write-back cached volume, then as many owner losses (kill -9, fail back) of a mirrored write-through volume and of a mirrored write-back one (its cache device lost too), under the guest's writes.
	RACKCACHE_CRASH_CYCLES=$(or $(SOAK_CYCLES),20) go test -count=1 -timeout 3h -v -run '^TestCachedCrashConsistency$$' ./test/dataplane \
	  | grep --line-buffered -E '^(=== RUN|--- |PASS|FAIL|ok)|crash_test.go.*(cycle|lost|seed)'
	KUBEBUILDER_ASSETS=$(RACKCACHE_CACHE)/k8s/$(K8S_VERSION) RACKCACHE_FAILOVER_CYCLES=$(or $(SOAK_CYCLES),20) \
	  go test -count=1 -timeout 3h -v -run '^TestKernelMultipathRidesThroughAFailover$$/kill' ./controllers/cachedvolume \
	  | grep --line-buffered -E '^(=== RUN|\s*--- |PASS|FAIL|ok)|failover_guest_test.go.*(losses|pause|guest [a-z-]+ =)'

.PHONY: bench
bench: ## Benchmarks; each prints ratios against its baseline run side by side.
	@# The NVMe/TCP bench runs the release daemon: build every binary first.
	cd $(DATAPLANE) && $(CARGO) build --release --workspace --bins && $(CARGO) bench --workspace

##@ Demo

.PHONY: demo
demo: deps envtest-assets guest-image ## Through the operator: Ceph, a local apiserver, a CachePool and CachedVolumes, a guest kernel using them; speedup, warm restart, kubectl get.
	hack/demo.sh up

.PHONY: demo-down
demo-down: ## Stop what `make demo` started (Ceph, apiserver, operator, dataplane), by PID.
	hack/demo.sh down

.PHONY: clean
clean: ## Remove build outputs in the clone (the shared cache stays; see README).
	-hack/demo.sh down
	-hack/cluster.sh down
	rm -rf bin _output
	cd $(DATAPLANE) && $(CARGO) clean
