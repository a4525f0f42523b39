# deputy — see README.md. `make` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO        ?= go
BIN       := $(CURDIR)/bin
KUBE_VERSION := v1.37.2
# kube-apiserver reports this version (go build does not stamp it by itself).
KUBE_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 \
	-X k8s.io/component-base/version.gitTreeState=clean
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: help
help: ## List targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-14s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build bin/deputy
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/deputy ./cmd/deputy

.PHONY: run
run: build ## Run deputy on its embedded default (https://127.0.0.1:8443, example policy); ARGS="--listen 127.0.0.1:9443" adds flags
	$(BIN)/deputy serve $(ARGS)

.PHONY: test
test: unit e2e ## Everything: unit tests, then e2e against a real kube-apiserver and etcd

.PHONY: unit
unit: ## Unit tests of the product module (race detector on)
	$(GO) test -race -count=1 ./...

IMAGE     ?= ghcr.io/deputy-dev/deputy:$(VERSION)
CONTAINER ?= docker

.PHONY: image
image: ## Build the container image IMAGE (docker or CONTAINER=podman; kind: kind load docker-image IMAGE)
	$(CONTAINER) build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

.PHONY: e2e
e2e: build test-binaries ## e2e suite and a small RBAC conformance run: real kube-apiserver v1.37.2 + etcd built from Go modules
	KUBEBUILDER_ASSETS=$(BIN) $(GO) test -tags envtest -count=1 -run 'APIServer' ./policy/... ./serve/ ./apps/
	HELM_BIN=$(BIN)/helm $(GO) test -count=1 -run 'HelmTemplate' ./syncer/source/helm/
	cd test && DEPUTY_BIN=$(BIN)/deputy KUBEBUILDER_ASSETS=$(BIN) CONFORMANCE_SARS=2000 CONFORMANCE_SEEDS=2 $(GO) test -count=1 -timeout 30m ./...

# RBAC conformance (issue #3): SARS SubjectAccessReviews over SEEDS random
# policies, each asked of a real kube-apiserver (RBAC only) and of deputy, then
# FUZZTIME of differential fuzzing against upstream's RBACAuthorizer.
.PHONY: conformance
conformance: build test-binaries ## RBAC conformance vs kube-apiserver: SARS (25000) over SEEDS (5), then FUZZTIME (10m) of fuzzing
	cd test && DEPUTY_BIN=$(BIN)/deputy KUBEBUILDER_ASSETS=$(BIN) CONFORMANCE_SARS=$${SARS:-25000} CONFORMANCE_SEEDS=$${SEEDS:-5} \
		WHOCAN_REQUESTS=$${WHOCAN_REQUESTS:-1000} WHOCAN_SEEDS=$${SEEDS:-5} \
		$(GO) test -count=1 -timeout 60m -v -run '^(TestAPIServerConformance|TestNamedRegressions|TestInProcessConformance|TestWhoCanAndRulesAgainstAPIServer|TestWhoCanAndRulesInProcess)$$' ./conformance/
	cd test && $(GO) test -run '^$$' -fuzz '^FuzzRBACConformance$$' -fuzztime $${FUZZTIME:-10m} ./conformance/

.PHONY: test-binaries
test-binaries: $(BIN)/kube-apiserver $(BIN)/etcd $(BIN)/helm ## Build kube-apiserver, etcd and helm into bin/ (cached; ~5 min cold)

# helm v3.22.0 (the library deputy renders charts with), for the comparison
# test of syncer/source/helm; its default Kubernetes version stamped as
# helm's release builds stamp it (that of the k8s.io modules, 1.37).
HELM_LDFLAGS := -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37
$(BIN)/helm: test/go.mod test/go.sum
	cd test && $(GO) build -ldflags "$(HELM_LDFLAGS)" -o $(BIN)/helm helm.sh/helm/v3/cmd/helm

$(BIN)/kube-apiserver: test/go.mod test/go.sum
	cd test && $(GO) build -ldflags "$(KUBE_LDFLAGS)" -o $(BIN)/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver

$(BIN)/etcd: test/go.mod test/go.sum test/tools/etcd/main.go
	cd test && $(GO) build -o $(BIN)/etcd ./tools/etcd

.PHONY: bench
bench: ## Benchmarks of the hot paths (see docs/benchmarks.md)
	$(GO) test -run '^$$' -bench . -benchmem ./authorizer/ ./tokenreview/ ./policy/ ./webhook/

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 30s)
	@for t in $$($(GO) test -list 'Fuzz.*' ./webhook/ | grep ^Fuzz); do $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $${FUZZTIME:-30s} ./webhook/ || exit 1; done
	@for t in $$($(GO) test -list 'Fuzz.*' ./policy/ | grep ^Fuzz); do $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $${FUZZTIME:-30s} ./policy/ || exit 1; done

.PHONY: lint
lint: ## gofmt and go vet on both modules
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd test && $(GO) vet ./...

.PHONY: clean
clean: ## Remove bin/deputy, bin/deputy-test (the e2e framework's build) and .deputy/ (keeps the cached kube-apiserver and etcd)
	rm -rf $(BIN)/deputy $(BIN)/deputy-test .deputy

.PHONY: load
load: build ## HTTP load: deputy /authorize vs a minimal echo handler, same run (see docs/benchmarks.md)
	test/load/compare.sh $${DURATION:-10s} $${CONCURRENCY:-32}

.PHONY: load-decisions
load-decisions: build ## HTTP load with decision logs none vs denied vs all, over allowed and DENY_RATIO (0.5) not allowed SARs (see docs/benchmarks.md)
	test/load/decisions.sh $${DURATION:-10s} $${CONCURRENCY:-32}
