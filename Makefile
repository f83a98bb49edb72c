# sluice — durable progressive rollouts for Knative Serving.
#
#   make build   build bin/sluice (and bin/sluice-dev, the local demo stack)
#   make test    lint, then every test: unit, replay, and integration on a real Temporal server
#   make lint    go vet and a gofmt check
#   make tools   build the Temporal CLI (dev server + UI) and the CloudEvents conformance tool into the tool cache
#   make demo    the local stack and a guided rollout (SLUICE_DEMO_UNATTENDED=1: promote by itself, check, exit)
#   make worker  run a Temporal dev server (UI on :8233) and a sluice worker against $KUBECONFIG
#   make record-histories  record this release's set of workflow histories (workflows/testdata/histories/VERSION)
#   make images  container images with ko, no Docker engine: dist/oci, dist/sluice.yaml (KO_DOCKER_REPO=...)
#   make release everything a release ships, reproducibly, into dist/: images with SBOMs, binaries for linux and
#                darwin on amd64 and arm64, resolved manifests, the packaged Helm chart, SHA256SUMS (release/build.sh)
#   make bench   rollouts on the local stack at 1, 5, 10, 25, 50 and 100 at once, 100 again on two workers, and 10 × 8
#                steps (docs/benchmarks.md; JSON to $BENCH_OUT), the knee and what saturates,
#                Go benchmarks of the hot paths, and the receiver's answer to a new candidate and to an irrelevant event (1,000 events each, 3 runs)
#   make chaos   120 rollouts on the local stack while a seeded fault injector kills, restarts, delays and cuts
#                everything around them, then invariants over every rollout (docs/reliability.md; CHAOS_SEED=... replays a run)
#   make bench-peers  sluice and Flagger v1.44.0 (knative provider) side by side on one stack at 1, 10 and 100
#                Services (PEERS=...), the same plan and the same measuring code (docs/benchmarks.md)
#   make bench-fleet  sluice and Temporal's production topology alone at 1,000 and 5,000 rollouts at once
#                (FLEET=..., FLEET_WORKERS=...), one and two workers, Knative played by a stand-in (docs/benchmarks.md)

GO ?= go
TOOLS := test/tools/install.sh

.PHONY: build test lint tools worker demo bench bench-peers bench-fleet images release chaos record-histories

# The version this tree is, or leads to, from the VERSION file (semver;
# docs/operations.md). `make release` stamps it as is; every other build
# adds the commit as semver build metadata (v0.1.0+243a163c5e1f), so a
# worker's Temporal identity and /metrics always say which code runs.
VERSION ?= $(shell bash release/version.sh)
LDFLAGS := -X github.com/sluicehq/sluice/version.Version=$(VERSION)

# bin/kn-sluice is the same program as a kn plugin: `kn sluice promote hello`
# once it is on the PATH.
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sluice ./cmd/sluice
	cp bin/sluice bin/kn-sluice
	$(GO) build -o bin/sluice-dev ./test/cmd/sluice-dev

lint:
	$(GO) vet ./...
	cd images && $(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

tools:
	@bash $(TOOLS) all

# The tool locations, built once per version into the cache outside the clone.
TOOL_ENV = env=$$(bash $(TOOLS) all) || exit 1; eval "$$env"; export SLUICE_BIN=$(CURDIR)/bin/sluice

# The upgrade test also needs the previous release, built from this
# repository's history (release/releases.txt); the demo does not.
test: lint build
	@$(TOOL_ENV); export SLUICE_PREVIOUS_BIN=$$(bash $(TOOLS) previous) || exit 1; bash test/run.sh

# Images for a cluster (docs/install.md): an OCI layout with linux/amd64 and
# linux/arm64, config/deploy resolved to $(KO_DOCKER_REPO)/sluice@digest, and
# the host platform's image as a tarball.
images:
	@SLUICE_VERSION=$(VERSION) bash images/build.sh dist

# A release, from a clean tree at the VERSION file's version (docs/operations.md,
# "Cutting a release"); KO_DOCKER_REPO names where its images will be pushed.
release:
	@bash release/build.sh dist

# The local demo stack: a rollout stops at a manual gate until you promote it.
demo: build
	@$(TOOL_ENV); ./bin/sluice-dev

worker: build
	@temporal=$$(bash $(TOOLS) temporal) || exit 1; \
	echo "Temporal UI: http://127.0.0.1:8233  (sluice worker logs below)"; \
	mkdir -p .dev; \
	$$temporal server start-dev --ip 127.0.0.1 --port 7233 --ui-port 8233 --log-level warn --db-filename .dev/temporal.db --dynamic-config-value system.enableActivityEagerExecution=true & \
	tpid=$$!; trap "kill $$tpid" EXIT INT TERM; \
	until $$temporal operator cluster health --address 127.0.0.1:7233 >/dev/null 2>&1; do sleep 0.5; done; \
	export TEMPORAL_ADDRESS=127.0.0.1:7233; ./bin/sluice setup && ./bin/sluice worker

# The long chaos run; `make test` runs a short one with a fixed seed. Its
# summary is also written to $(CHAOS_OUT).
CHAOS_OUT ?= bin/chaos.txt
chaos: build
	@$(TOOL_ENV); export SLUICE_ARTIFACTS=$${SLUICE_ARTIFACTS:-$(CURDIR)/test-artifacts}; \
	SLUICE_CHAOS=long CHAOS_OUT=$(CURDIR)/$(CHAOS_OUT) $(GO) test -count=1 -v -timeout 85m -run '^TestChaos$$' ./test/chaos/

# A stack level that fails (the machine cannot make its Revisions Ready in
# time) is in the table; the Go benchmarks still run, and make fails at the end.
bench: build
	@$(TOOL_ENV); $(GO) run ./test/bench $(BENCH_FLAGS); echo $$? > bin/.bench-status
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./knative/ ./workflows/ ./events/ ./analysis/ | tee bench-go.txt
	@temporal=$$(bash $(TOOLS) temporal) || exit 1; \
	SLUICE_TEMPORAL_BIN=$$temporal $(GO) test -run '^$$' -bench 'EventToWorkflowStart|IrrelevantEvent' -benchtime 1000x -count 3 ./test/integration/ | grep -v '^time=' | tee -a bench-go.txt
	@status=$$(cat bin/.bench-status); rm -f bin/.bench-status; \
	if [ "$$status" != 0 ]; then echo "bench: a level of the stack bench failed; see its table above"; exit $$status; fi

# Flagger is built from the Go module proxy into the tool cache, its Canary
# CRD and RBAC applied from its module.
PEERS ?= 1,10,100
bench-peers: build
	@$(TOOL_ENV); export FLAGGER_BIN=$$(bash $(TOOLS) flagger) || exit 1; \
	export FLAGGER_DIR=$$(cd test/tools/flagger && $(GO) list -m -f '{{.Dir}}' github.com/fluxcd/flagger) || exit 1; \
	$(GO) run ./test/bench -peers $(PEERS) -timeout 10m $(PEERS_FLAGS)

# The fleet run: the stand-in of test/servingstandin answers for Knative
# (whose own controller cannot carry thousands of Revisions on two cores),
# so the limits that show are sluice's and Temporal's (JSON to $BENCH_OUT).
FLEET ?= 1000,5000
FLEET_WORKERS ?= 1,2
bench-fleet: build
	@$(TOOL_ENV); $(GO) run ./test/bench -fleet $(FLEET) -fleet-workers $(FLEET_WORKERS) $(FLEET_FLAGS)

# A release's own set of recorded histories (docs/operations.md, "Cutting a
# release"): the integration tests that record one rollout shape each write
# it into workflows/testdata/histories/<VERSION>, replayed by every later build.
record-histories: build
	@$(TOOL_ENV); v=$$(tr -d '[:space:]' < VERSION); dir=$(CURDIR)/workflows/testdata/histories/$$v; \
	rm -rf "$$dir"; mkdir -p "$$dir"; \
	SLUICE_RECORD_HISTORY=$$dir $(GO) test -count=1 -timeout 20m ./test/integration/ && ls "$$dir"
