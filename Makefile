# finale: the two commands are `make demo` and `make test`. Both install what
# they need on a fresh Debian machine (PostgreSQL from apt, the Kubernetes
# binaries and the Temporal server built from Go modules into a cache) and
# say what they are doing.
#
# Modules: the library is the root module (its go.mod requires only what the
# library packages import, at the lowest versions they need); the reference
# operator, the Temporal and Argo examples and the scenarios are modules of
# their own (MODULES), each with a replace of the root; tools/* build the
# real servers.
MODULES := examples/postgres examples/temporal examples/argo scenarios

GO            ?= go
export GOTOOLCHAIN := local
# This repository's make builds the Kubernetes binaries from Go modules and
# never asks the release site: the machines it runs on reach the Go module
# proxy and Debian's packages only, and make test sends nothing off the
# machine. A user's finale check or testenv downloads them by default;
# FINALE_KUBE_RELEASE_URL=https://dl.k8s.io make kube downloads here too.
export FINALE_KUBE_RELEASE_URL ?= off
TEST_TIMEOUT  ?= 40m
TEST_FLAGS    ?=

# The builds (the servers, controller-gen, go vet's compile of every
# dependency) run their compilers with GOGC=400: they collect garbage a
# quarter as often and hold more memory meanwhile. go build -race std on
# a cold cache took 82 and 78 user CPU-seconds at 400 against 92 and 94 at
# the default. The tests keep the environment's GOGC: the servers they
# start and the test binaries run as they would for anyone.
BUILD_GOGC ?= 400
kube kube133 temporal argo controller-gen vet vet-modules images guard-image operator-image: export GOGC := $(BUILD_GOGC)

.PHONY: demo test test-campaigns test-kube133 deps postgres kube kube133 server-modules kube-embed kube-cold temporal argo tidy controller-gen vet vet-modules lint bench bench-library campaign model failover images guard-image operator-image

# The demo needs the control plane and PostgreSQL only: it builds nothing
# else (the Temporal server, the Argo controller and controller-gen are
# built where they are used: make test, their scenarios).
demo: postgres kube
	@echo "== building and running the demo (scenarios/cmd/finale-lab)"
	cd scenarios && $(GO) run ./cmd/finale-lab demo

# make test, in four steps, each saying what it does:
#  1. PostgreSQL; the Kubernetes build's module downloads, alone; then
#     its compile beside the go.mod tidy check, controller-gen and the
#     Temporal and Argo builds' module downloads (mostly waiting on the
#     network), so that the compile no longer waits on downloads that
#     share the network with the tidy check's (the Kubernetes build took
#     12 min 50 s beside them cold at c322d5d, 8 min 27 s alone);
#  2. go vet of every module, one after another, then the Temporal server
#     and Argo controller builds and the Kubernetes v1.33 build (kube133,
#     for the kube133 job). Vetting with the tests' compile flags
#     (GO_COMPILE: -race, no DWARF) compiles every dependency as the tests
#     need it, once, and the tests find it in the build cache (vet without
#     -race compiled everything a second time, and modules vetted side by
#     side each compiled the Kubernetes packages they share). One compile at
#     a time: go build already uses both cores, and two side by side took
#     longer than one after the other (the vet beside the builds 24 min
#     cold, against 8 min for the vet alone and about 10 for the builds);
#  3. the tests, TEST_JOBS jobs at a time: one job alone leaves the cores
#     idle while its tests wait (on timeouts, holds, servers); four keep
#     both busy (181 % CPU warm at a load of 14 to 22, so the CPU, not the
#     waits, sets the time: process accounting gave kube-apiserver 29 % of
#     it, linking the test binaries 17 %, PostgreSQL 9 %, etcd 8 %). Each
#     job's output goes to $(TEST_LOGS)/JOB.log; a line says when each
#     starts and ends;
#  4. a failed job's failures are printed, each failed test's first and
#     last lines (its message may start them or end them, after a
#     narration), panics, and the log's last lines; CI keeps only the end
#     of the output, so the summary is short.
# The library module's tests include internal/modproxy's TestConsumer:
# finale's module zip served by a file-based GOPROXY to a separate consumer
# module (internal/modproxy/testdata/consumer, pinned to the oldest
# controller-runtime and k8s.io the library supports) whose real-stack test
# must pass. The kube133 job runs the library's real-stack tests
# (KUBE133_PACKAGES) on Kubernetes v1.33, the oldest server finale
# supports (FINALE_KUBE_VERSION=v1.33); every other job runs on v1.37.
# The CI-sized fault campaigns are not in make test: they need
# more CPU than a 2-core CI run affords; make test-campaigns runs them.
TEST_JOBS ?= 4
TEST_LOGS ?= $(CURDIR)/bin/test-logs
# Longest first (warm), so that the last to start is not the last to end.
# Test binaries long enough to hold up their module are jobs of their own:
# the finale check proofs of the reference operator
# (examples/postgres/check) and of examples/keys (examples/keys/check, in
# the library module).
TEST_MODULES := root scenarios examples/postgres/check examples/postgres examples/argo examples/keys/check examples/temporal kube133 tools/temporal tools/kube tools/kube133 tools/argo
SCENARIO_CAMPAIGNS := ^(TestRandomizedCampaign|TestNaiveCampaignReportsReplayableSeeds|TestAPIServerCampaign|TestFailover|TestFailoverNaive)$$
test: postgres
	@echo "== module downloads of the Kubernetes build (tools/kube) first, alone on the network"
	@cd tools/kube && $(GO) mod download
	@$(MAKE) --no-print-directory -j4 kube tidy controller-gen server-modules
	@rm -rf $(TEST_LOGS); mkdir -p $(TEST_LOGS)
	@start=$$(date +%s); echo "== go vet $(GO_COMPILE), one module at a time (a cold run compiles every dependency here, for the tests after), then the Temporal and Argo builds"; \
	$(MAKE) --no-print-directory -k vet-modules temporal argo kube133; vet=$$?; \
	echo "== go test $(GO_COMPILE) -count=1: $(words $(TEST_MODULES)) jobs, $(TEST_JOBS) at a time; logs in $(TEST_LOGS)"; \
	$(MAKE) --no-print-directory -k -j$(TEST_JOBS) $(addprefix test-module/,$(TEST_MODULES)); rc=$$?; \
	echo "== make test: $$(( $$(date +%s) - start )) s for vet and the tests"; \
	if [ $$vet -ne 0 ]; then echo "== FAILED: go vet or a server build (above)"; fi; \
	if [ $$rc -ne 0 ]; then for f in $(TEST_LOGS)/*.failed; do [ -e "$$f" ] || continue; l=$${f%.failed}.log; \
		echo "== FAILED: $$(cat $$f) (log $$l; its failures and last lines follow)"; awk '$(FAILURES_AWK)' "$$l" | head -120; tail -8 "$$l"; done; fi; \
	[ $$vet -eq 0 ] && [ $$rc -eq 0 ]

# FAILURES_AWK prints, from a go test log, each failed test's --- FAIL
# line and the first 3 and last 10 lines of its output (its indented
# lines: the message often starts it, a log tail or narration ends it), every
# panic with 30 lines after it, and the FAIL lines, cut to 240 columns.
FAILURES_AWK = function flush() { if (head != "") { print head; for (i = 1; i <= n; i++) { if (i == 4 && n > 15) { print "        [" n - 13 " lines]"; i = n - 9 } \
		print substr(buf[i], 1, 240) } } n = 0; head = ""; infail = 0 } \
	/^[ \t]*--- FAIL/ { flush(); head = $$0; match($$0, /^[ \t]*/); ind = RLENGTH; infail = 1; next } \
	infail && match($$0, /^[ \t]*/) && RLENGTH > ind { buf[++n] = $$0; next } \
	infail { flush() } \
	/^panic:/ { p = 30 } p > 0 { print substr($$0, 1, 240); p--; next } \
	/^FAIL/ { print } \
	END { flush() }

# test-campaigns: the CI-sized fault campaigns and leader failovers of
# scenarios (a 20-run randomized campaign, the naive build's replayable
# seeds, the apiserver campaign, failover with and without the fence).
# About 5 minutes of both cores: run it before a change to lifecycle,
# ledger, hold, sweep, fence or the harness lands.
test-campaigns: deps
	cd scenarios && $(GO_TEST) -v -run '$(SCENARIO_CAMPAIGNS)' .

# test-kube133: the library's real-stack tests on Kubernetes v1.33, the
# oldest server finale supports, alone (make test runs them as its kube133
# job): the control plane, the capture, hold, ledger and watchdog
# guarantees, the test environment users import, examples/keys' operator
# end to end (lifecycle, records, holds and a namespace deletion), and the
# consumer check (internal/modproxy: finale's module zip in a module pinned
# to the oldest k8s.io and controller-runtime finale supports, whose
# real-stack test then runs on the oldest server too). The same packages
# run on v1.37 in the root job.
KUBE133_PACKAGES := ./controlplane/ ./capture/ ./hold/ ./ledger/ ./testenv/ ./watchdog/ ./examples/keys/controller/ ./internal/modproxy/
test-kube133: postgres kube133
	$(call module_test,kube133)

# test-module/M runs job M's tests into its log; used by test.
test-module/%:
	@m=$*; log=$(TEST_LOGS)/$$(echo $$m | tr / -).log; start=$$(date +%s); echo "== $$m: started"; \
	if ( $(call module_test,$*) ) >"$$log" 2>&1; then echo "== $$m: ok, $$(( $$(date +%s) - start )) s"; \
	else echo "$$m" >"$${log%.log}.failed"; echo "== $$m: FAILED after $$(( $$(date +%s) - start )) s"; exit 1; fi

# test_cmd.M is job M's command where it is not the plain one (the tests
# of module M). The tools/* modules test with internal/binbuild's compile
# flags (BINBUILD_FLAGS) and without -race, so that they reuse the packages
# make kube, make temporal and make argo compiled (with -race they would
# compile the servers' thousands of packages a second time); their tests
# only read their go.mod. The tests run with -vet=off: go vet ran first,
# with every analyzer (a superset of go test's), and go test's own vet,
# keyed by its other analyzer set, analysed every dependency a second time
# (about 2 CPU-minutes a module cold, 40 CPU-seconds warm). The tools
# modules are vetted by make vet only: their vet analyses the servers'
# packages (tools/temporal's, 1,751 of them: over 3.5 CPU-minutes cold)
# for a few small files that make kube, make temporal and make argo build.
#
# The tests and vet compile without DWARF (-gcflags=all=-dwarf=false) and
# the test binaries link without it (-ldflags=-w): only debuggers read it;
# race reports, panics and test failures take file and line from the Go
# symbol table. go build -race std on a cold cache took 16 % less CPU
# without it at GOGC=400 (8 % at the default), and the link of lifecycle's
# test binary a fifth to a third less (two runs each; make test links about
# 106 test binaries a run). go vet compiles with the same flags so that the
# tests find its packages in the build cache, and the commands tests build
# (testenv.Build, the consumer check) copy them from the test binary's build
# information.
NO_DWARF   = -gcflags=all=-dwarf=false
GO_COMPILE = -race $(NO_DWARF)
# BINBUILD_FLAGS: the compile flags internal/binbuild builds the servers with.
BINBUILD_FLAGS = -trimpath $(NO_DWARF)
GO_TEST = $(GO) test $(GO_COMPILE) -count=1 -vet=off -ldflags=-w -timeout $(TEST_TIMEOUT) $(TEST_FLAGS)
GO_VET  = $(GO) vet $(GO_COMPILE)
# test_all_but tests every package of the module but those ending in $(1)
# (a job of its own); go list failing fails the job.
test_all_but = pkgs=$$($(GO) list ./...) && $(GO_TEST) $$(echo "$$pkgs" | grep -v '$(1)$$')
test_cmd.root                     = $(call test_all_but,/examples/keys/check)
test_cmd.examples/keys/check      = $(GO_TEST) ./examples/keys/check/
test_cmd.scenarios                = cd scenarios && $(GO_TEST) -skip '$(SCENARIO_CAMPAIGNS)' ./...
test_cmd.examples/postgres/check  = cd examples/postgres && $(GO_TEST) ./check/
test_cmd.examples/postgres        = cd examples/postgres && $(call test_all_but,/examples/postgres/check)
test_cmd.tools/temporal           = cd tools/temporal && $(GO) test $(BINBUILD_FLAGS) -count=1 -vet=off ./...
test_cmd.tools/kube               = cd tools/kube && $(GO) test $(BINBUILD_FLAGS) -count=1 -vet=off ./...
test_cmd.tools/kube133            = cd tools/kube133 && $(GO) test $(BINBUILD_FLAGS) -count=1 -vet=off ./...
test_cmd.kube133                  = FINALE_KUBE_VERSION=v1.33 $(GO_TEST) $(KUBE133_PACKAGES)
test_cmd.tools/argo               = cd tools/argo && GONOSUMDB=$(ARGO_NOSUMDB) $(GO) test $(BINBUILD_FLAGS) -count=1 -vet=off ./...
module_test = $(or $(test_cmd.$(1)),cd $(1) && $(GO_TEST) ./...)

deps: postgres kube temporal argo controller-gen

# server-modules downloads the modules of the Temporal, Kubernetes v1.33
# and Argo builds (tools/temporal, tools/kube133, tools/argo) into the
# module cache; make test runs it
# while the Kubernetes build computes.
server-modules:
	@echo "== module downloads of the Temporal and Argo builds (tools/temporal, tools/argo)"
	@cd tools/temporal && $(GO) mod download
	@cd tools/kube133 && $(GO) mod download
	@cd tools/argo && GONOSUMDB=$(ARGO_NOSUMDB) $(GO) mod download

# controller-gen is fetched and built once into the Go caches here, so the
# CRD drift test can run it offline (its network stays on loopback).
controller-gen:
	@echo "== controller-gen $(CONTROLLER_GEN_VERSION) (Go module cache)"
	@$(CONTROLLER_GEN) --version

# tidy fails when go.mod or go.sum is not what go mod tidy would write.
tidy:
	@set -e; for m in . $(MODULES); do \
		echo "== go mod tidy -diff: $$m"; \
		(cd $$m && $(GO) mod tidy -diff) || { echo "$$m/go.mod is not tidy: cd $$m && go mod tidy, and commit"; exit 1; }; \
	done

# Debian's postgresql package provides initdb and postgres under
# /usr/lib/postgresql/N/bin; pgserver starts a throwaway server from them.
postgres:
	@if ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then \
		echo "== PostgreSQL: $$(ls -d /usr/lib/postgresql/*/bin | tail -1) (installed)"; \
	else \
		echo "== PostgreSQL missing: apt-get update && apt-get install -y postgresql"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql; \
	fi

# kube-apiserver, kube-controller-manager, kubectl and etcd once into
# $${FINALE_KUBE_BIN_DIR:-~/.cache/finale/...}: from an envtest asset
# directory of the same version, the official release binaries (SHA-256
# verified; FINALE_KUBE_RELEASE_URL=off builds instead), else built from Go
# modules (tools/kube, as embedded in internal/kubebin). A user runs the
# same command as go run github.com/finale-dev/finale/controlplane/kubeinstall@VERSION.
kube:
	@echo "== Kubernetes binaries (envtest assets, the release, else built from Go modules; then cached)"
	$(GO) run ./controlplane/kubeinstall

# kube133: the same for Kubernetes v1.33.13, the oldest server finale
# supports (tools/kube133), into ~/.cache/finale/kube-v1.33.13-etcd-v3.5.21.
kube133:
	@echo "== Kubernetes v1.33 binaries (envtest assets, the release, else built from Go modules; then cached)"
	$(GO) run ./controlplane/kubeinstall -version v1.33

# kube-embed copies tools/kube and tools/kube133 (edit them there: go get,
# go mod tidy) into internal/kubebin/module.txtar and module133.txtar, which
# the build uses and the module zip carries; internal/kubebin's tests fail
# while they differ.
kube-embed:
	$(GO) run ./internal/kubebin/kubeembed

# kube-cold builds the Kubernetes binaries as a user's first test does
# where neither the release site nor envtest assets have them (downloads
# off, no envtest directory), from finale's module zip alone (a file-based GOPROXY ahead of the module proxy
# for everything else), with empty module, build and binary caches in a
# throwaway directory, and prints the time. Minutes and several GiB, all
# removed at the end.
kube-cold:
	@set -e; tmp=$$(mktemp -d /tmp/finale-kube-cold.XXXXXX); trap 'chmod -R u+w "$$tmp"; rm -rf "$$tmp"' EXIT; \
	env=$$($(GO) run ./internal/modproxy/publish -dir "$$tmp/proxy"); eval "$$env"; \
	echo "== cold build of the Kubernetes binaries from $$FINALE_MODULE@$$FINALE_VERSION alone, caches empty, in $$tmp"; \
	cd "$$tmp"; start=$$(date +%s); \
	GOMODCACHE="$$tmp/gomod" GOCACHE="$$tmp/gocache" GOFLAGS=-modcacherw FINALE_KUBE_RELEASE_URL=off KUBEBUILDER_ASSETS= XDG_DATA_HOME="$$tmp/data" \
		$(GO) run "$$FINALE_MODULE/controlplane/kubeinstall@$$FINALE_VERSION" -dir "$$tmp/bin"; \
	echo "== cold build from the zip: $$(( $$(date +%s) - start )) s; module cache $$(du -sh "$$tmp/gomod" | cut -f1), build cache $$(du -sh "$$tmp/gocache" | cut -f1), binaries $$(du -sh "$$tmp/bin" | cut -f1)"

# The Temporal server the G1 seed runs on (go.temporal.io/server's
# temporaltest: SQLite in memory), built from Go modules (tools/temporal) once
# into $${FINALE_TEMPORAL_BIN_DIR:-~/.cache/finale/temporal-v1.32.1}.
temporal:
	@echo "== Temporal server (built once from Go modules, then cached)"
	$(GO) run ./internal/temporalbin/temporalinstall

# The stock Argo Workflows controller (v4.1.4) that the G3 seed runs
# against, built from tools/argo once into
# $${FINALE_ARGO_BIN_DIR:-~/.cache/finale/argo-v4.1.4}. One dependency is
# not in the checksum database; only that module path is exempted.
ARGO_NOSUMDB := github.com/google/go-containerregistry/pkg/authn/k8schain
argo:
	@echo "== Argo Workflows workflow-controller (built once from Go modules, then cached)"
	$(GO) run ./internal/argobin/argoinstall

# The release, defined once: the tag of every image the manifests pull
# (examples/*/config), which the image builds are given and refuse to
# differ from; internal/images' test checks that the manifests, this
# variable and the targets below agree. Users name it in go install
# github.com/finale-dev/finale/cmd/finale@VERSION, and finale version
# prints it.
VERSION ?= v0.1.0

# The container images the manifests pull (internal/images lists them),
# built from this repository without a container engine: each command as
# a static linux binary in a one-layer OCI image named and tagged as its
# Deployment pulls it and run as its Pod's user, written as an OCI image
# layout (bin/NAME-image) and an OCI archive (bin/NAME-image.tar). Nothing
# is pushed: copy them with skopeo, crane or ctr:
#   skopeo copy oci:bin/operator-image:$(VERSION) docker://REGISTRY/finale-postgres-operator:$(VERSION)
#   ctr -n k8s.io images import bin/operator-image.tar
# guard-image: the Argo guard (examples/argo/config/manager/manager.yaml);
# operator-image: the reference operator (examples/postgres/config/manager).
IMAGES_DIR ?= $(CURDIR)/bin
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
GUARD_IMAGE      ?= $(IMAGES_DIR)/guard-image
GUARD_IMAGE_ARCH ?= $(IMAGE_ARCH)
OPERATOR_IMAGE   ?= $(IMAGES_DIR)/operator-image
IMAGEBUILD = $(GO) run ./internal/images/imagebuild
images: guard-image operator-image
guard-image:
	@echo "== the Argo guard's image $(VERSION) (OCI layout, no container engine) into $(GUARD_IMAGE)"
	$(IMAGEBUILD) -image guard -version $(VERSION) -o $(GUARD_IMAGE) -arch $(GUARD_IMAGE_ARCH)
operator-image:
	@echo "== the reference operator's image $(VERSION) (OCI layout, no container engine) into $(OPERATOR_IMAGE)"
	$(IMAGEBUILD) -image operator -version $(VERSION) -o $(OPERATOR_IMAGE) -arch $(IMAGE_ARCH)

# vet: every module. vet-modules vets the library and MODULES, each with
# GO_COMPILE (as make test compiles their tests), and goes on past a
# failure; the tools modules with internal/binbuild's flags.
vet: vet-modules
	cd tools/kube && $(GO) vet $(BINBUILD_FLAGS) ./...
	cd tools/kube133 && $(GO) vet $(BINBUILD_FLAGS) ./...
	cd tools/temporal && $(GO) vet $(BINBUILD_FLAGS) ./...
	cd tools/argo && GONOSUMDB=$(ARGO_NOSUMDB) $(GO) vet $(BINBUILD_FLAGS) ./...

vet-modules:
	@rc=0; for m in . $(MODULES); do echo "== go vet $(GO_COMPILE): $$m"; (cd $$m && $(GO_VET) ./...) || { echo "== go vet FAILED: $$m"; rc=1; }; done; exit $$rc

GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
lint:
	$(GOLANGCI_LINT) run ./...

# 1,000 randomized fault schedules against the reference operator, with a
# table of runs, faults injected by type and invariant violations (expected:
# 0). About 9 runs a minute on 2 cores with 2 workers: this takes hours;
# CAMPAIGN_RUNS and CAMPAIGN_SEED change it. A failing run prints its seed:
#   (cd scenarios && go run ./cmd/finale-lab scenario campaign --seed SEED --runs 1) replays it.
# CAMPAIGN_APISERVERS=true adds a second kube-apiserver per world and its
# faults (stale-apiserver-lag, apiserver-partition, apiserver-failover).
CAMPAIGN_RUNS ?= 1000
CAMPAIGN_SEED ?= 1
CAMPAIGN_APISERVERS ?= true
campaign: deps
	cd scenarios && $(GO) run ./cmd/finale-lab scenario campaign --seed $(CAMPAIGN_SEED) --runs $(CAMPAIGN_RUNS) --apiservers=$(CAMPAIGN_APISERVERS)

# Leader failover: two replicas of the reference operator as processes on
# the real Lease API. Each seeded run SIGKILLs the leader during a sweep, a
# burst of creates and a namespace deletion, cuts it off from the API server,
# then pauses it and wakes it after its lease passed; a table of takeover,
# first-call and finish times and of what the cut-off and woken replicas sent
# PostgreSQL (expected: nothing). About a minute a run here.
# FAILOVER_ELECTION=operator runs the replicas with the operator's default
# election timing (15s/10s/2s) instead of 3s/2s/500ms: about 2.5 minutes a run.
#   (cd scenarios && go run ./cmd/finale-lab scenario failover-naive)   shows the zombie without the fence.
FAILOVER_RUNS ?= 10
FAILOVER_SEED ?= 1
FAILOVER_ELECTION ?= fast
failover: deps
	cd scenarios && $(GO) run ./cmd/finale-lab scenario failover --seed $(FAILOVER_SEED) --runs $(FAILOVER_RUNS) --election $(FAILOVER_ELECTION)

# The deletion protocol (lifecycle, ledger, hold, sweep, capture),
# model-checked: every state of the small worlds, every naive variant's
# counterexample, with state counts and times. make test runs the CI-sized
# part (internal/model's tests); this is the full suite.
model:
	$(GO) run ./internal/model/cmd/model

# bench: the guarantees' cost in one table (docs/benchmarks.md), every
# figure beside its baseline from the same run and its target, each part
# on a fresh stack: the sweeper's pass over 100,000 records against a bare
# paginated LIST of them (its setup, 100,000 owners and records, is outside
# the figures), 1,000 Roles created then deleted with the guarantees on,
# with the hold alone and as the naive build with their CPU, API writes
# and reads and PostgreSQL round trips per lifecycle, each build twice in
# a mirrored order, then side by side with the naive build, with all
# guarantees and with each alone (records, hold); a namespace of 1,000
# Roles deleted with each build, and 10,000 Roles in 100 namespaces with
# each build, the operator as a process of its own. 21 to 32 minutes on 2
# idle cores.
bench: deps
	cd scenarios && $(GO) run ./cmd/finale-lab bench -all

# bench-library: the library's and the seeds' own benchmarks, each against
# a baseline measured in the same run (direct calls, dropping the same
# roles directly), minutes in all.
bench-library: deps
	$(GO) test -run '^$$' -bench . -benchtime=3x ./controlplane/
	$(GO) test -run '^$$' -bench . -benchtime=500ms ./clientpool/
	$(GO) test -run '^$$' -bench . -benchtime=20x ./capture/
	cd examples/postgres && $(GO) test -run '^$$' -bench . -benchtime=1x -timeout 30m ./stacktest/hold/
	cd examples/temporal && $(GO) test -run '^$$' -bench PoisonedClient -benchtime=1x -timeout 30m ./controller/
	cd examples/postgres && $(GO) test -run '^$$' -bench 'SweepPass/n=10000$$' -benchtime=1x -timeout 30m ./stacktest/sweep/

# generate: the example operators' deepcopy code and CRDs, from the
# kubebuilder markers in examples/postgres/api, examples/temporal/api and
# examples/keys/api, with a pinned controller-gen (the same one the
# config/crd drift tests run; running generate once also puts it in the
# module cache they read offline).
CONTROLLER_GEN_VERSION := v0.23.0
CONTROLLER_GEN ?= $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
GENERATED     := examples/postgres/api examples/postgres/config/crd examples/temporal/api examples/temporal/config/crd examples/keys/api examples/keys/config/crd

.PHONY: generate verify-generate

generate:
	@echo "== controller-gen: examples/postgres, examples/temporal and examples/keys deepcopy and CRDs"
	cd examples/postgres && $(CONTROLLER_GEN) object paths=./api/... crd:crdVersions=v1 output:crd:dir=./config/crd
	cd examples/temporal && $(CONTROLLER_GEN) object paths=./api/... crd:crdVersions=v1 output:crd:dir=./config/crd
	$(CONTROLLER_GEN) object paths=./examples/keys/api/... crd:crdVersions=v1 output:crd:dir=./examples/keys/config/crd

# verify-generate fails when the committed generated files differ from what
# generate makes (changed or new files).
verify-generate: generate
	@if [ -n "$$(git status --porcelain -- $(GENERATED))" ]; then \
		echo "generated files drifted; run make generate and commit:"; \
		git status --porcelain -- $(GENERATED); git --no-pager diff -- $(GENERATED); exit 1; \
	fi
	@echo "== generated files are up to date"
