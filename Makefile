# capi-inplace: make help lists the targets.
SHELL := /usr/bin/env bash
ROOT := $(abspath .)
BIN := $(ROOT)/bin
GO ?= go
export KUBEBUILDER_ASSETS := $(BIN)

# Test time-outs are generous for CI's 2 cores; the suites finish far sooner.
TEST_FLAGS ?= -count=1 -timeout=20m
# SKIP_BASELINES=1 leaves out the lanes' baselines (upstream's fake extension,
# kubeadm's own procedure): figures for the docs, not checks of the product.
# CI sets it.
SKIP_BASELINES ?=
E2E_FLAGS ?= -count=1 -timeout=60m -v -parallel 4 $(if $(SKIP_BASELINES),-skip '^TestUpstreamFakeExtensionBaseline$$')

.PHONY: help
help: ## Show this help.
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'

# The product binaries (static: they run in distroless images) and the test harness's.
# PRODUCT_FLAGS are the release build's (hack/tools/images goBuild): no local paths,
# no symbol table or DWARF (stack traces keep function names and lines).
PRODUCT_FLAGS ?= -trimpath -ldflags "-s -w"
# capi-inplace: extension and CLI; kubectl-inplace: the same CLI as a kubectl plugin
# (docs/cli.md); capi-inplace-agent: the node agent;
# capi-inplace-etcd: the agent's etcd helper (etcd's client and etcdutl, in the agent's
# image beside it); capi-inplace-cel: the agent's CEL helper (cel-go, for CEL gates, in
# the agent's image beside it); capi-inplace-dev: the demo and the simulated agent
# (never shipped; its agent finds the CEL helper beside it in bin/).
.PHONY: build
build: ## Build bin/capi-inplace, bin/capi-inplace-agent (+ its etcd and CEL helpers) and the harness bin/capi-inplace-dev.
	CGO_ENABLED=0 $(GO) build $(PRODUCT_FLAGS) -o $(BIN)/capi-inplace ./cmd/capi-inplace
	CGO_ENABLED=0 $(GO) build $(PRODUCT_FLAGS) -o $(BIN)/capi-inplace-agent ./cmd/capi-inplace-agent
	CGO_ENABLED=0 $(GO) build $(PRODUCT_FLAGS) -o $(BIN)/capi-inplace-etcd ./cmd/capi-inplace-etcd
	CGO_ENABLED=0 $(GO) build $(PRODUCT_FLAGS) -o $(BIN)/capi-inplace-cel ./cmd/capi-inplace-cel
	CGO_ENABLED=0 $(GO) build $(PRODUCT_FLAGS) -o $(BIN)/kubectl-inplace ./cmd/kubectl-inplace
	$(GO) build -o $(BIN)/capi-inplace-dev ./test/cmd/capi-inplace-dev

# Release images without a Docker engine (hack/tools/images, go-containerregistry):
# capi-inplace (extension, non-root 65532) and capi-inplace-agent (root), each one OCI
# index for linux/amd64 and linux/arm64 on a static base assembled locally (CA bundle
# from golang.org/x/crypto/x509roots), with an SPDX SBOM; the same commit gives the same
# digests. Output: _artifacts/images/{oci/,digests.txt,*.spdx.json}. IMAGE_PUSH=<registry>/<org>
# pushes (e.g. IMAGE_PUSH=localhost:5000/capi-inplace); the digests are printed.
IMAGE_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE_PUSH ?=
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64

.PHONY: image
image: ## Build the extension and agent images (OCI, linux/amd64+arm64, SBOM, no Docker); IMAGE_PUSH=<registry>/<org> pushes.
	cd hack/tools/images && $(GO) run . -repo $(ROOT) -out $(ROOT)/_artifacts/images -version $(IMAGE_VERSION) -platforms $(IMAGE_PLATFORMS) \
		-image capi-inplace=./cmd/capi-inplace -image capi-inplace-agent=./cmd/capi-inplace-agent,./cmd/capi-inplace-etcd,./cmd/capi-inplace-cel -root-image capi-inplace-agent \
		$(if $(IMAGE_PUSH),-push $(IMAGE_PUSH))

.PHONY: tools
tools: ## Build kube-apiserver, etcd and kubectl into bin/ (only when missing).
	hack/tools/build.sh k8s

.PHONY: tools-capi
tools-capi: tools ## Build the upstream Cluster API managers into bin/ (only when missing).
	hack/tools/build.sh capi

.PHONY: tools-clusterctl
tools-clusterctl: ## Build bin/clusterctl (Cluster API's, at go.mod's version) for the clusterctl round trip test (only when missing).
	hack/tools/build.sh clusterctl

# The API types' deep copies (api/v1alpha1/zz_generated.deepcopy.go) and their
# CustomResourceDefinitions (config/crd/bases), from the +kubebuilder markers in
# api/v1alpha1, with controller-gen pinned in hack/tools/controllergen. Run it after
# changing a type and commit what it writes.
.PHONY: generate
generate: ## Regenerate api/v1alpha1's deep copies and config/crd/bases from the API types.
	hack/tools/build.sh controller-gen
	$(BIN)/controller-gen object:headerFile=/dev/null paths=./api/...
	$(BIN)/controller-gen crd paths=./api/... output:crd:artifacts:config=config/crd/bases

# clusterctl's provider contract (hack/release, docs/install.md): the components YAML
# (config/release rendered, images and settings as ${VAR:=default} variables) and
# metadata.yaml, in _artifacts/release/runtime-extension-capi-inplace/<version>/ (the
# layout of a clusterctl local repository; the two files are a GitHub release's assets).
# RELEASE_VERSION defaults to the tag at HEAD, else a 0.1 development version.
RELEASE_VERSION ?= $(shell git describe --tags --exact-match --match 'v*' 2>/dev/null || echo v0.1.0-dev)
RELEASE_REGISTRY ?= ghcr.io/capi-inplace

.PHONY: release-manifests
release-manifests: ## Write the clusterctl release artifacts for RELEASE_VERSION to _artifacts/release/.
	$(GO) run ./hack/release/cmd/release-manifests -config config -version $(RELEASE_VERSION) -registry $(RELEASE_REGISTRY) -out $(ROOT)/_artifacts/release

.PHONY: deps
deps: ## Install the Debian packages the backend tests use (ostree, rauc, ...).
	hack/install-deps.sh

.PHONY: lint
lint: ## golangci-lint (.golangci.yml: import rules, aliases, vet, staticcheck, errors, ...), gofmt, the docs' links.
	hack/tools/build.sh lint
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(BIN)/golangci-lint run ./...
	hack/check-doc-links.sh

.PHONY: test
test: tools tools-clusterctl deps lint ## Unit and integration tests (real kube-apiserver and etcd via envtest; clusterctl round trip).
	$(GO) test $(TEST_FLAGS) ./...
	@# The image builder is its own module: reproducible digests, push/pull by digest.
	cd hack/tools/images && $(GO) test $(TEST_FLAGS) ./...

# FUZZTIME is how long `make fuzz` runs each fuzz target. `make test` runs every
# target's seed corpus (testdata/fuzz/<Name>) as ordinary tests.
FUZZTIME ?= 10s

.PHONY: fuzz
fuzz: ## Run every Fuzz* target (in *_fuzz_test.go) for $(FUZZTIME) each; findings land in testdata/fuzz.
	@set -e; for f in $$(find . -path ./bin -prune -o -path ./_cache -prune -o -name '*_fuzz_test.go' -print | sort); do \
		for name in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "==> $$name ($$(dirname $$f), $(FUZZTIME))"; \
			$(GO) test -run='^$$' -fuzz="^$$name$$" -fuzztime=$(FUZZTIME) ./$$(dirname $$f); \
		done; \
	done

.PHONY: e2e
e2e: tools-capi build ## End-to-end scenarios against real upstream Cluster API.
	$(GO) test $(E2E_FLAGS) -tags e2e ./test/e2e/...
	@# The single-node path with CAPI's InPlaceUpdates gate off needs a stack of its own.
	E2E_SINGLENODE_GATE_OFF=1 $(GO) test $(E2E_FLAGS) -tags e2e ./test/e2e/ -run TestSingleNodeInPlaceWithGateOff
	@# A second run, not a second package in the first run: packages run in parallel and
	@# only one local stack fits on a machine (the in-memory provider's fixed port); -p 1
	@# runs these two packages one after the other.
	$(GO) test $(E2E_FLAGS) -p 1 -tags e2e ./internal/cli/ ./test/cmd/capi-inplace-dev/ -run 'TestDemo|TestPlanOnLocalStack'

# The agent's image for the real-node lane (the agent and its etcd and CEL helpers, as
# in the release image), tagged by the binaries' content.
E2ENODE_IMAGE_TAR := $(ROOT)/_artifacts/realnode/capi-inplace-image.tar

.PHONY: e2e-node
e2e-node: tools-capi build ## Real-node lane: the agent upgrades real kubeadm nodes in place, rolls back a failed gate, resumes after being killed (root; docs/real-node.md).
	hack/install-deps.sh
	hack/realnode/build.sh
	@tag=$$(hack/realnode/agent-image.sh $(E2ENODE_IMAGE_TAR)) || exit 1; \
	echo "==> agent image $$tag"; \
	E2ENODE_AGENT_IMAGE=$$tag E2ENODE_AGENT_IMAGE_TAR=$(E2ENODE_IMAGE_TAR) \
		$(GO) test $(E2E_FLAGS) -tags e2enode ./test/e2enode/; \
	rc=$$?; hack/realnode/node.sh down-all; exit $$rc

# The real Cluster API lane (hack/realcapi, test/e2ereal, docs/real-capi.md): a Docker
# engine in a network namespace of its own, upstream Cluster API's Docker provider
# creating kind-style kubeadm nodes from images built here, our extension installed as
# in production; the test binary runs in the engine's network namespace.
REALCAPI_ARTIFACTS := $(ROOT)/_artifacts/realcapi
E2EREAL_FLAGS ?= -test.v -test.timeout=60m -test.parallel=7 $(if $(SKIP_BASELINES),-test.skip '^TestKubeadmBaseline$$')

.PHONY: e2e-real
e2e-real: tools-capi build ## Real Cluster API lane: upstream CAPI and its Docker provider make real kubeadm nodes, updated in place (root; docs/real-capi.md).
	hack/install-deps.sh
	hack/realnode/build.sh >/dev/null
	hack/realcapi/dockerd.sh down
	@mkdir -p $(REALCAPI_ARTIFACTS)
	$(GO) test -c -tags e2ereal -o $(REALCAPI_ARTIFACTS)/e2ereal.test ./test/e2ereal/
	@node=$$(hack/realcapi/images.sh) && tag=$$(hack/realnode/agent-image.sh $(REALCAPI_ARTIFACTS)/capi-inplace-agent.tar) && \
	echo "==> node image $$node, agent image $$tag" && \
	cd test/e2ereal && E2EREAL_NODE_IMAGE=$$node E2EREAL_AGENT_IMAGE=$$tag E2EREAL_AGENT_IMAGE_TAR=$(REALCAPI_ARTIFACTS)/capi-inplace-agent.tar \
		$(ROOT)/hack/realcapi/dockerd.sh run $(REALCAPI_ARTIFACTS)/e2ereal.test $(E2EREAL_FLAGS); \
	rc=$$?; $(ROOT)/hack/realcapi/dockerd.sh down; exit $$rc

# The OS image lane (hack/osimage, test/e2eos, docs/backends.md): Debian images with
# RAUC A/B slots or an OSTree sysroot and GRUB boot counting, booted in QEMU under
# software emulation.
# One vCPU per VM and two scenarios at a time, one per core: QEMU's TCG slows far
# more than in proportion when VMs outnumber cores (a power-on took 3 min with four
# VMs on two cores, 45 s with two; the lane 18 min against 9).
E2EOS_FLAGS ?= -v -timeout 60m -parallel 2

.PHONY: e2e-os
e2e-os: tools ## OS image lane: RAUC A/B slots and OSTree deployments, GRUB boot counting, real reboots and power cuts in QEMU VMs (root; docs/backends.md).
	hack/install-deps.sh
	@img=$$(hack/osimage/build.sh) && echo "==> OS images $$img" && \
	E2EOS_IMAGE=$$img $(GO) test $(E2EOS_FLAGS) -tags e2eos ./test/e2eos/

# BENCH_FLAGS are passed to the driver, e.g. BENCH_FLAGS='-sections hooks,agent -rounds 5'.
BENCH_FLAGS ?=

.PHONY: bench
bench: tools-capi build ## Performance suite (hooks vs upstream, rollout vs a null extension, agent, scale, guard, fleet status); one table, also in _artifacts/bench.md.
	$(GO) build -o $(BIN)/capi-inplace-nullext ./bench/cmd/capi-inplace-nullext
	$(GO) build -o $(BIN)/capi-inplace-bench ./bench/cmd/capi-inplace-bench
	CGO_ENABLED=0 $(GO) build $(PRODUCT_FLAGS) -o $(BIN)/capi-inplace-nodeinformer ./bench/cmd/capi-inplace-nodeinformer
	$(BIN)/capi-inplace-bench -bin $(BIN) -null-extension $(BIN)/capi-inplace-nullext -out _artifacts/bench.md $(BENCH_FLAGS)

.PHONY: demo
demo: tools-capi build ## The whole in-place upgrade on this machine, with live progress.
	$(BIN)/capi-inplace-dev demo

.PHONY: demo-real
demo-real: tools-capi build ## The demo on real kubeadm nodes (containers of a Docker engine, real kubelets; root; docs/real-capi.md).
	hack/install-deps.sh
	hack/realnode/build.sh >/dev/null
	hack/realcapi/dockerd.sh down
	@mkdir -p $(REALCAPI_ARTIFACTS)
	@node=$$(hack/realcapi/images.sh) && tag=$$(hack/realnode/agent-image.sh $(REALCAPI_ARTIFACTS)/capi-inplace-agent.tar) && \
	$(ROOT)/hack/realcapi/dockerd.sh run $(BIN)/capi-inplace-dev demo --real --node-image=$$node --agent-image=$$tag \
		--agent-image-tar=$(REALCAPI_ARTIFACTS)/capi-inplace-agent.tar $(DEMO_FLAGS); \
	rc=$$?; $(ROOT)/hack/realcapi/dockerd.sh down; exit $$rc

.PHONY: clean
clean: ## Remove built binaries (tools are rebuilt when missing).
	rm -rf $(BIN)
