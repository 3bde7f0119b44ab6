# Brewlet's build and test entry points. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
export BREWLET_TOOLS_CACHE ?= $(HOME)/.cache/brewlet-tools
TOOLS_BIN := $(BREWLET_TOOLS_CACHE)/bin
export BREWLET_TOOLS_BIN := $(TOOLS_BIN)
export GOTOOLCHAIN := local
BIN := $(CURDIR)/bin
GO_TEST_FLAGS ?=
# Fuzz targets: package:target pairs run for FUZZTIME each in `make fuzz`.
FUZZTIME ?= 15s

.PHONY: all build tools generate verify-generated lint test test-unit test-rules test-e2e fuzz demo down images runtimes bench clean

all: build

## build: compile every binary into ./bin
build:
	@mkdir -p $(BIN)
	go build -o $(BIN)/ ./cmd/...

## tools: build or reuse the pinned external tools (hack/versions.env)
tools:
	hack/tools.sh all

## generate: deepcopy functions and CRD manifests from api/, copied into the Helm chart (never edit them by hand)
generate:
	$(TOOLS_BIN)/controller-gen object paths=./api/...
	$(TOOLS_BIN)/controller-gen crd paths=./api/... output:crd:artifacts:config=config/crd
	rm -f charts/brewlet/crds/*.yaml && cp config/crd/*.yaml charts/brewlet/crds/

## verify-generated: fail when generated files are stale
verify-generated: generate
	@git diff --exit-code -- api config/crd charts/brewlet/crds || { echo "generated files are stale: run 'make generate' and commit" >&2; exit 1; }
	@test -z "$$(git status --porcelain -- api config/crd charts/brewlet/crds)" || { git status --porcelain -- api config/crd charts/brewlet/crds; echo "untracked generated files: run 'make generate' and commit" >&2; exit 1; }

## lint: gofmt, go vet and golangci-lint
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); test -z "$$out" || { echo "gofmt needed:"; echo "$$out"; exit 1; }
	go vet ./...
	go vet -tags bench ./test/...
	$(TOOLS_BIN)/golangci-lint run ./...

# The suites under test/ (docs/testing.md): test/agent runs with the race detector (about
# 3 minutes): its concurrency (passes, install workers, GC, the writer lease) is in the test
# process. The other suites run without it: there the concurrency is in the real processes
# they drive (containerd, shim, runc), which the detector does not instrument.
E2E_MAIN = $(shell go list ./test/... | grep -v '/test/agent$$')

## test-unit: unit tests and fuzz seed corpora (no external components), race detector on
test-unit:
	go test -count=1 -race $(GO_TEST_FLAGS) ./api/... ./internal/... ./cmd/...

## test-rules: the chart's Prometheus rules checked and unit-tested with promtool
test-rules:
	$(TOOLS_BIN)/promtool check rules charts/brewlet/files/prometheus-rules.yaml
	cd test/prometheus && $(TOOLS_BIN)/promtool test rules rules_test.yaml

## test-e2e: the suites under test/ against real components (needs root); test/agent under -race.
## Two suites of the main pass run at once (-p 2): they mostly wait on the components they
## drive, and every instance has its own directories, ports, bridge, subnet and cgroups.
## The suites of one run share built runtime images in a directory removed after the run.
## Each test binary runs its nodes in a mount namespace of its own (test/framework/mountns_linux.go)
## whose root is shared in the main tier (as on systemd nodes, and as `make demo` runs) and
## private in the agent's tier, whatever this machine's root is.
test-e2e: build
	set -e; dir=$$(mktemp -d /tmp/brewlet-artifacts.XXXXXX); trap 'rm -rf "$$dir"' EXIT; \
	export BREWLET_TEST_ARTIFACTS=$$dir; \
	BREWLET_NODE_ROOT=shared go test -count=1 $(GO_TEST_FLAGS) -timeout 45m -p 2 $(E2E_MAIN); \
	BREWLET_NODE_ROOT=private go test -count=1 -race $(GO_TEST_FLAGS) -timeout 30m ./test/agent/; \
	BREWLET_NODE_ROOT=private go test -count=1 $(GO_TEST_FLAGS) -timeout 5m -run '^TestNodeMountNamespace$$' ./test/node/

## test: everything CI runs, from a fresh machine: tools, generated files, lint, all tiers
test: tools verify-generated lint test-unit test-rules test-e2e

## demo: the main job: a real one-node cluster (etcd, kube-apiserver, controller-manager,
## scheduler, containerd + runc, registry, kubelet), the chart installed with helm, the CPython
## runtime approved, a web app holding only /app deployed and answering through its Service,
## then the runtime rotated to generation 2. The cluster stays up; a second run reuses it.
demo: tools
	go run ./hack/demo up

## down: remove everything `make demo` started
down:
	go run ./hack/demo down

## images: build the operator and provisioner images (linux/amd64 and linux/arm64, no
## container engine) and push them to REGISTRY; prints one "name repo@sha256:..." line each
images:
	@test -n "$(REGISTRY)" || { echo "usage: make images REGISTRY=127.0.0.1:5000/brewlet [TAG=v0.1.0]" >&2; exit 2; }
	go run ./hack/images --registry $(REGISTRY) --tag $(or $(TAG),dev)

## runtimes: build the local runtime images from Debian packages and push them to REGISTRY
runtimes:
	@test -n "$(REGISTRY)" || { echo "usage: make runtimes REGISTRY=127.0.0.1:5000" >&2; exit 2; }
	hack/runtimes.sh $(REGISTRY) all

## bench: shim memory and CRI create+start latency against stock runc, runtime install
## against ctr pull, the payoff: N apps as conventional images (shared and drifted bases)
## against Brewlet, incl. a CVE rotation (BENCH_PODS=10, BENCH_REPS=6, BENCH_APPS=20,
## BENCH_BASES=5; writes docs/payoff.svg), the agents' API load (BREWLET_AGENT_NODES=1000)
## and the fleet rotation (BREWLET_FLEET_NODES=1000, BREWLET_FLEET_WORKLOADS=500); results
## go to docs/benchmarks.md by hand. The shim, install and payoff figures are compared with
## the ones recorded there: a median worse by more than the run's spread prints REGRESSION and
## fails the run.
bench: tools build
	set -o pipefail; go test -tags bench -count=1 -timeout 120m -run 'TestBench' -v ./test/bench/ | grep -E '^\||^REGRESSION|^(ok|FAIL|---)'

## fuzz: run each fuzz target for FUZZTIME
fuzz:
	hack/fuzz.sh $(FUZZTIME)

clean:
	rm -rf $(BIN)
