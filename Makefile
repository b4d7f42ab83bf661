# finale: the two commands are `make demo` and `make test`. Both install what
# they need on a fresh Debian machine (PostgreSQL from apt, the Kubernetes
# binaries built from Go modules into a cache) and say what they are doing.

GO            ?= go
export GOTOOLCHAIN := local
TEST_TIMEOUT  ?= 40m
TEST_FLAGS    ?=

.PHONY: demo test deps postgres kube vet lint bench

demo: deps
	@echo "== building and running the demo"
	$(GO) run ./cmd/finale demo

test: deps
	@echo "== go test -race: module github.com/finale-dev/finale (real control plane and PostgreSQL; first run compiles with -race for several minutes)"
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./...
	@echo "== go test -race: module tools/kube"
	cd tools/kube && $(GO) vet ./... && $(GO) test -race -count=1 ./...

deps: postgres kube

# Debian's postgresql package provides initdb and postgres under
# /usr/lib/postgresql/N/bin; pgserver starts a throwaway server from them.
postgres:
	@if ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then \
		echo "== PostgreSQL: $$(ls -d /usr/lib/postgresql/*/bin | tail -1) (installed)"; \
	else \
		echo "== PostgreSQL missing: apt-get update && apt-get install -y postgresql"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql; \
	fi

# kube-apiserver, kube-controller-manager, kubectl and etcd, built from Go
# modules (tools/kube) once into $${FINALE_KUBE_BIN_DIR:-~/.cache/finale/...}.
kube:
	@echo "== Kubernetes binaries (built once from Go modules, then cached)"
	$(GO) run ./internal/kubebin/kubeinstall

vet:
	$(GO) vet ./...
	cd tools/kube && $(GO) vet ./...

GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
lint:
	$(GOLANGCI_LINT) run ./...

bench: deps
	$(GO) test -run '^$$' -bench . -benchtime=3x ./controlplane/
