# Sluice: Kubernetes-native distributed rate limiting.
# `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

BIN ?= $(CURDIR)/bin
GO ?= go
CONTROLLER_GEN_VERSION ?= v0.18.0
CONTROLLER_GEN ?= $(BIN)/controller-gen
# crd-ref-docs renders docs/reference/api.md from the Go types of every version under api/.
CRD_REF_DOCS_VERSION ?= v0.3.0
CRD_REF_DOCS ?= $(BIN)/crd-ref-docs
POLICIES ?= config/samples/policies.yaml
HTTP_ADDR ?= 127.0.0.1:8080
GRPC_ADDR ?= 127.0.0.1:8081
ADMIN_ADDR ?= 127.0.0.1:8082
# go test flags; e.g. make test TESTFLAGS='-run TestConformance -v'
TESTFLAGS ?=
# ./controllers alone takes 20-30 minutes on a loaded 2-core machine, twice
# that beside another make test.
TEST_TIMEOUT ?= 60m
# Helm, built from the Go module proxy into bin/. The ldflags stamp what the
# release binaries say: their version and the Kubernetes version (client-go
# v0.34 is 1.34) that helm template and helm lint assume.
HELM_VERSION ?= v3.19.0
# kubectl for the tests, built into bin/ like kube-apiserver (same release).
KUBECTL_VERSION ?= 1.33.13
# Tools built into bin/ (helm, kubectl) come first for every recipe.
export PATH := $(BIN):$(PATH)
HELM ?= $(BIN)/helm
HELM_LDFLAGS ?= -s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	$(foreach p,pkg/chartutil pkg/lint/rules,-X helm.sh/helm/v3/$(p).k8sVersionMajor=1 -X helm.sh/helm/v3/$(p).k8sVersionMinor=34)
CHART ?= charts/sluice
# The release version is the chart's appVersion: images are tagged with it.
VERSION ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$$/\1/p' $(CHART)/Chart.yaml)
IMAGE_REGISTRY ?= ghcr.io/sluice-dev
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code for the API types.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRDs into config/crd/bases (the v1beta1 feature rules' markers from api/v1beta1/features.go first, hack/featurecel) and the operator's RBAC into config/rbac.
	$(GO) run ./hack/featurecel
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=sluice-operator paths=./controllers/... output:rbac:artifacts:config=config/rbac
	$(MAKE) --no-print-directory helm-crds

.PHONY: helm-crds
helm-crds: ## Generate the chart's CRD templates and the operator's RBAC rules, and copy the alert rules, from config/ (run by manifests).
	$(GO) run ./hack/chartgen crds -in config/crd/bases -out $(CHART)/templates
	$(GO) run ./hack/chartgen rbac -in config/rbac/role.yaml -out $(CHART)/templates/_operator-rules.tpl
	cp config/prometheus/alerts.yaml $(CHART)/files/prometheus-alerts.yaml

.PHONY: helm-docs
helm-docs: ## Generate charts/sluice/README.md from values.yaml, values.schema.json and README.md.gotmpl.
	$(GO) run ./hack/chartgen readme -chart $(CHART)

.PHONY: docs
docs: ## Generate the CRD reference docs/reference/api.md from the Go types of every version under api/ (crd-ref-docs, config in hack/crd-ref-docs.yaml).
	CRD_REF_DOCS_VERSION=$(CRD_REF_DOCS_VERSION) hack/build-crd-ref-docs.sh $(CRD_REF_DOCS)
	$(CRD_REF_DOCS) --log-level=WARN --source-path=./api --config=hack/crd-ref-docs.yaml --renderer=markdown \
		--output-mode=single --output-path=docs/reference/api.md

.PHONY: fmt
fmt: ## Run gofmt on the code.
	gofmt -s -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	$(GO) vet ./...

.PHONY: verify
verify: generate manifests helm-docs docs ## Regenerate, then fail if generated files (docs/reference/api.md among them) or formatting changed, or controllers/ or limiter/ has a file over 400 lines or a function over 80 (hack/funclen).
	@test -z "$$(gofmt -s -l $$(git ls-files '*.go'))" || { gofmt -s -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting (make fmt)"; exit 1; }
	@git diff --exit-code -- api config $(CHART) docs/reference || { echo "generated files are stale: run make generate manifests helm-docs docs and commit"; exit 1; }
	@$(GO) run ./hack/funclen -enforce controllers -enforce limiter

##@ Build

.PHONY: build
build: ## Build bin/limiter, bin/operator and bin/loadgen.
	$(GO) build -o $(BIN)/limiter ./cmd/limiter
	$(GO) build -o $(BIN)/operator ./cmd/operator
	$(GO) build -o $(BIN)/loadgen ./cmd/loadgen

.PHONY: images
images: ## Build OCI image archives of the operator, the limiter and the load generator into dist/images, without a Docker daemon.
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) $(GO) run ./hack/imagebuild -out dist/images \
		-registry $(IMAGE_REGISTRY) -version $(VERSION) -revision "$$(git rev-parse HEAD 2>/dev/null)" -arch $(IMAGE_ARCH) operator limiter loadgen

.PHONY: run
run: build ## Run the limiter on the memory store with the sample policies.
	@echo "Sluice limiter: HTTP on $(HTTP_ADDR), Envoy RLS gRPC on $(GRPC_ADDR), admin and /metrics on $(ADMIN_ADDR), policies from $(POLICIES)"
	@echo "Try it (the 6th request within a minute gets 429):"
	@echo "  curl -i -X POST http://$(HTTP_ADDR)/v1/ratelimit/check -d '{\"domain\":\"payments-api\",\"descriptors\":[{\"entries\":[{\"key\":\"user_id\",\"value\":\"alice\"},{\"key\":\"path\",\"value\":\"/v1/charges\"}]}]}'"
	@echo ""
	$(BIN)/limiter --policies $(POLICIES) --store memory --http-addr $(HTTP_ADDR) --grpc-addr $(GRPC_ADDR) --admin-addr $(ADMIN_ADDR)

##@ Test

.PHONY: deps
deps: ## Install what the tests need outside Go (redis-server, nginx, curl).
	hack/install-deps.sh

.PHONY: envtest
envtest: ## Build kube-apiserver and etcd for envtest into bin/k8s (cached).
	hack/setup-envtest.sh >/dev/null

.PHONY: kubectl
kubectl: ## Build kubectl $(KUBECTL_VERSION) into bin/ from the Go module proxy (cached; under 2 minutes the first time).
	KUBECTL_VERSION=$(KUBECTL_VERSION) hack/build-kubectl.sh $(BIN)/kubectl

.PHONY: erl
erl: ## Build envoyproxy/ratelimit's service into bin/erl from the Go module proxy (cached), for the ERL differential tests (limiter/erlcompat).
	hack/build-erl.sh $(BIN)/erl

.PHONY: gubernator
gubernator: ## Build gubernator v2.13.0's server into bin/gubernator from the Go module proxy (cached; a few minutes the first time), a peer of the open-loop benchmark.
	hack/build-gubernator.sh $(BIN)/gubernator

# The test tiers (docs/development/testing.md). The unit tier is the packages
# whose tests need no process, under -short, which skips the integration
# tests among them (internal/testtier).
UNIT_PKGS ?= ./api/... ./limiter/... ./internal/... ./controllers/resources/... ./controllers/rediscluster/... ./cmd/loadgen/... ./hack/chartgen/...

.PHONY: test
test: ## Every tier, one after the other (each takes the machine's cores; another make test may run beside it, docs/development/testing.md): make test-integration, make bench-smoke, then make e2e (E2E=0 skips it).
	$(MAKE) --no-print-directory test-integration
	$(MAKE) --no-print-directory bench-smoke
	@if [ "$(E2E)" != 0 ]; then $(MAKE) --no-print-directory e2e; fi

.PHONY: test-unit
test-unit: ## The unit tier: pure tests, no redis-server, API server or limiter process (go test -short), in a minute or two.
	$(GO) test -race -short $(TESTFLAGS) $(UNIT_PKGS)

.PHONY: test-integration
test-integration: deps envtest kubectl erl helm-lint helm-template helm-test ## The unit and integration tiers with -race: real redis-server, envtest and limiter processes; the chart on envtest.
	KUBEBUILDER_ASSETS=$(BIN)/k8s $(GO) test -race -timeout $(TEST_TIMEOUT) $(TESTFLAGS) $$($(GO) list ./... | grep -v -e /charts/ -e /test/e2e$$)
	$(MAKE) --no-print-directory test-dashboard

.PHONY: test-dashboard
test-dashboard: deps envtest ## The Grafana dashboard's every query on a real Prometheus engine over what a real limiter and operator expose (hack/dashboardcheck, a Go module of its own: Prometheus needs another k8s.io).
	@d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && \
	SLUICE_DASHBOARD_EXPOSITIONS=$$d KUBEBUILDER_ASSETS=$(BIN)/k8s $(GO) test -race -count=1 -run '^TestDashboardExpositions$$' ./controllers/ && \
	cd hack/dashboardcheck && SLUICE_DASHBOARD_EXPOSITIONS=$$d $(GO) test -count=1 ./...

.PHONY: dashboard-picture
dashboard-picture: deps envtest ## Draw docs/operations/dashboard.png: each dashboard panel's queries over a real limiter's and operator's metrics, plotted with gonum/plot (not Grafana).
	@d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && \
	SLUICE_DASHBOARD_EXPOSITIONS=$$d KUBEBUILDER_ASSETS=$(BIN)/k8s $(GO) test -count=1 -run '^TestDashboardExpositions$$' ./controllers/ && \
	cd hack/dashboardcheck && SLUICE_DASHBOARD_EXPOSITIONS=$$d SLUICE_DASHBOARD_PICTURE=$(CURDIR)/docs/operations/dashboard.png $(GO) test -count=1 -run '^TestDashboardPicture$$' ./...

.PHONY: helm
helm: ## Build helm $(HELM_VERSION) into bin/ from the Go module proxy (cached; about 2 minutes the first time).
	@[[ "$$($(HELM) version --template '{{.Version}}' 2>/dev/null)" == "$(HELM_VERSION)" ]] || { \
		echo "building helm $(HELM_VERSION) into $(BIN)"; \
		GOBIN=$(BIN) $(GO) install -trimpath -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION); }

.PHONY: helm-lint
helm-lint: helm ## helm lint --strict the chart with its default values and each charts/sluice/ci/*-values.yaml.
	$(HELM) lint --strict $(CHART)
	for f in $(CHART)/ci/*-values.yaml; do $(HELM) lint --strict $(CHART) -f $$f; done

.PHONY: helm-template
helm-template: helm ## Render the chart with its default values and each ci/*-values.yaml (helm-test validates them on the API server).
	$(HELM) template sluice $(CHART) --namespace sluice-system >/dev/null
	for f in $(CHART)/ci/*-values.yaml; do echo "helm template -f $$f"; $(HELM) template sluice $(CHART) --namespace sluice-system -f $$f >/dev/null; done

.PHONY: helm-test
helm-test: helm envtest kubectl ## Install, upgrade and uninstall the chart on the envtest API server; RBAC, schema and rendering checks.
	KUBEBUILDER_ASSETS=$(BIN)/k8s HELM=$(HELM) $(GO) test -race -timeout $(TEST_TIMEOUT) -count=1 ./charts/sluice/tests/

##@ A real cluster (as root: a Kubernetes of one or two nodes on this machine)

# Where the cluster lives: certificates, etcd, containerd's root and state,
# kubelet's root, volumes, logs. One cluster per machine.
CLUSTER_DIR ?= $(CURDIR)/.cluster
# How many nodes (hack/cluster/lib.sh: the others than the host's are
# kubelets in network namespaces of their own): cluster-up starts 1 unless
# told, the quick path; e2e runs the journey on 2 unless told.
NODES ?=
# 1: kube-router's firewall enforces NetworkPolicies on every node; 0: none.
NETPOL ?= 1
# go test flags of the journey, e.g. make e2e E2E_FLAGS='-run TestJourney/[1235]-'
E2E_FLAGS ?=
E2E_TIMEOUT ?= 45m

.PHONY: cluster-deps
cluster-deps: ## Install containerd, runc, the CNI plugins, iptables, conntrack and openssl from Debian's packages.
	hack/install-deps.sh --cluster

.PHONY: cluster-build
cluster-build: cluster-deps envtest kubectl helm ## Build kubelet, kube-controller-manager, kube-scheduler, kube-proxy, CoreDNS, local-path-provisioner and every image into bin/cluster (cached; about 15 minutes the first time).
	hack/cluster/build.sh

.PHONY: cluster-up
cluster-up: cluster-build ## Start a Kubernetes of NODES nodes (default 1; NETPOL=0: no NetworkPolicy enforcement) in $(CLUSTER_DIR) (then: . $(CLUSTER_DIR)/env; kubectl get pods -A).
	CLUSTER_DIR=$(CLUSTER_DIR) NODES=$(or $(NODES),1) NETPOL=$(NETPOL) hack/cluster/up.sh

.PHONY: cluster-down
cluster-down: ## Stop the cluster and put the machine back as cluster-up found it.
	CLUSTER_DIR=$(CLUSTER_DIR) hack/cluster/down.sh

.PHONY: e2e
e2e: cluster-build ## cluster-up (2 nodes unless NODES=1), the user's journey on it (test/e2e: helm install, a Redis Cluster fleet, samples, nginx, NetworkPolicies, faults, upgrade), cluster-down.
	CLUSTER_DIR=$(CLUSTER_DIR) NODES=$(or $(NODES),2) NETPOL=$(NETPOL) E2E_TIMEOUT=$(E2E_TIMEOUT) hack/cluster/e2e.sh $(E2E_FLAGS)

.PHONY: bench
bench: deps build erl gubernator bench-operator bench-collector bench-lifetime bench-priority ## Load-test the limiter (gRPC RLS) on memory and Redis, closed loop and open loop (with envoyproxy/ratelimit and gubernator beside it), Go benchmarks, the operator's apply-to-enforced latency, reserve-then-settle's overshoot, and priority shedding.
	hack/bench.sh
	hack/bench-openloop.sh

.PHONY: bench-lifetime
bench-lifetime: deps ## Costs known at the end: the overshoot of reserve-then-settle next to charge-at-end's, same run, memory and Redis, 4/16/64 requests in flight.
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkLifetimeOvershoot$$' -benchtime 1x ./limiter/service/ | grep -E '^(overshoot|Benchmark|ok|FAIL)'

.PHONY: bench-priority
bench-priority: deps ## Priority shedding: a load shedder offered 2x its capacity in a mix of priorities, on memory, Redis and Redis Cluster; prints the admitted mix.
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkPriorityShedding$$' -benchtime $(PRIORITY_BENCHTIME) ./limiter/service/

.PHONY: bench-collector
bench-collector: envtest kubectl ## The collector at 500 policies x 20 limiter endpoints (3 real): status writes/min and CPU, on envtest.
	SLUICE_SCALE=1 SLUICE_SCALE_PHASE=$(COLLECTOR_PHASE) KUBEBUILDER_ASSETS=$(BIN)/k8s $(GO) test -count=1 -run '^TestCollectorScale$$' -v -timeout 15m ./controllers/ | grep -E '^(collector scale|--- |ok|FAIL)'

.PHONY: bench-fleet
bench-fleet: deps ## Two-tier mode with 1, 4 and 10 real limiter processes on one Redis: overshoot, false denials, Redis commands per decision; fast path; one pod vs noop.
	hack/bench-fleet.sh

.PHONY: bench-regions
bench-regions: deps ## Regions: 3 regions 80ms apart (a redis-server each), a Global 1000/min per user at 60/30/10: admitted vs limit and bound, p99 per region vs a synchronous check, grant calls per decision, a partition and its healing.
	REGIONS_BENCH_PERIOD=$(REGIONS_BENCH_PERIOD) $(GO) test -count=1 -run '^$$' -bench '^BenchmarkRegions$$' -benchtime 1x -timeout 30m ./limiter/regions/ | grep -E '^(regions|Benchmark|ok|FAIL|    )'

.PHONY: bench-operator
bench-operator: envtest kubectl ## Apply-to-enforced latency over 100 edits, on envtest with real limiter processes.
	KUBEBUILDER_ASSETS=$(BIN)/k8s $(GO) test -count=1 -run '^$$' -bench ApplyToEnforced -benchtime 1x ./controllers/

# What bench-smoke shortens: -benchtime of bench-priority, the measured
# phases of bench-collector, and bench-regions' period.
PRIORITY_BENCHTIME ?= 20000x
REGIONS_BENCH_PERIOD ?= 1m
COLLECTOR_PHASE ?= 1m
# hack/bench.sh, hack/bench-faults.sh, hack/bench-fleet.sh and
# hack/bench-openloop.sh (one rate, one round, one step) with every measured
# interval cut to a second (their figures mean nothing then).
BENCH_SMOKE_ENV := BENCH_DURATION=1s BENCH_WARMUP=0s BENCH_GOTIME=1x BENCH_MEMORY_KEYS=100 BENCH_KEYS=100 \
	BENCH_FAULT_BEFORE=1s BENCH_FAULT_DURING=1s BENCH_FAULT_AFTER=1s \
	BENCH_FLEET_PODS=1,2 BENCH_FLEET_FIXED_PODS=2 BENCH_FLEET_DURATION=1s \
	BENCH_OPEN_RATES=2000 BENCH_OPEN_ROUNDS=1 BENCH_OPEN_DURATION=1s BENCH_OPEN_WARMUP=0s \
	BENCH_OPEN_STEP_RATES=2000 BENCH_OPEN_STEP_DURATION=1s BENCH_OPEN_PAUSE=0

.PHONY: bench-smoke
bench-smoke: ## One short run of every make bench* target (hack/bench.sh with its Go benchmarks at -benchtime 1x, hack/bench-openloop.sh at one rate, bench-fleet, -lifetime, -priority, -collector, -operator, -regions), so none rots unseen; make test runs it. The figures mean nothing.
	$(BENCH_SMOKE_ENV) $(MAKE) --no-print-directory bench PRIORITY_BENCHTIME=1x COLLECTOR_PHASE=2s
	$(BENCH_SMOKE_ENV) $(MAKE) --no-print-directory bench-fleet
	$(MAKE) --no-print-directory bench-regions REGIONS_BENCH_PERIOD=3s

$(CONTROLLER_GEN):
	GOBIN=$(BIN) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
