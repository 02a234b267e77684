# The Hero coordinator. `make help` lists the targets.

SHELL := /bin/bash
.DEFAULT_GOAL := help

SERVICES := supervisor-daemon scheduler router runner mycelium-gateway
BINARIES := $(SERVICES) heroctl
# Every Go module of the workspace (go.work).
MODULES := $(shell go work edit -json | sed -n 's/.*"DiskPath": "\.\/\(.*\)".*/\1/p')

GO ?= go
GOBIN := $(shell $(GO) env GOPATH)/bin
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
GOCYCLO_VERSION := v0.6.0
# No function may be more complex than this (gocyclo), generated code aside.
MAX_CYCLO := 25
# -timeout is a safety net against a hang: an e2e half took 20 minutes at a load of 30.
TEST_FLAGS ?= -race -count=1 -timeout 30m
# The e2e core suite, run a second time against a Redis that serves TLS only, with
# client certificates and ACL users (tests/e2e/services_test.go: HERO_E2E_REDIS).
CORE_TESTS := ^(TestDiamondFlow|TestRetryThenFail|TestTimeoutKillsProcessGroup|TestStopRunningJob|TestJobRun|TestFlowWait|TestResultFileLogsAndDiscover|TestPermissionMatrix|TestDispatcher.*|TestDelayedJob)$$
# The core suite and the lifecycle tests (cancel, flow.retry, retention, events,
# delete), run once more with two Redis servers and a placement map that puts the
# tests' context on the second one (HERO_E2E_REDIS=placed).
PLACED_TESTS := ^(TestDiamondFlow|TestRetryThenFail|TestTimeoutKillsProcessGroup|TestStopRunningJob|TestJobRun|TestFlowWait|TestResultFileLogsAndDiscover|TestPermissionMatrix|TestDispatcher.*|TestCancelRunningFlow|TestDLQAndFlowRetry|TestRetention.*|TestWatchResume|TestDeleteLeavesNothing|TestNewContextServedAtOnce)$$

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# What `heroctl version` prints: the git revision (with -dirty for uncommitted changes)
# and the build's date. go build records no revision in workspace mode.
REVISION := $(shell git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
BUILD_DATE := $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
HEROCTL_LDFLAGS := -X main.revision=$(REVISION) -X main.buildDate=$(BUILD_DATE)

# hero-zygote (lib/sandbox/zygote/zygote.c): the runner finds it next to its binary.
ZYGOTE_CFLAGS := -O2 -Wall -Wextra

.PHONY: build
build: ## build static binaries into bin/
	@mkdir -p bin
	@for s in $(SERVICES); do \
		echo "build bin/$$s"; \
		CGO_ENABLED=0 $(GO) build -trimpath -o bin/$$s ./services/$$s || exit 1; \
	done
	@echo "build bin/heroctl ($(REVISION))"; CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(HEROCTL_LDFLAGS)' -o bin/heroctl ./cmd/heroctl
	@echo "build bin/hero-zygote (the runner's forking sandbox, C)"; $(CC) $(ZYGOTE_CFLAGS) -static -o bin/hero-zygote lib/sandbox/zygote/zygote.c 2>/dev/null \
		|| $(CC) $(ZYGOTE_CFLAGS) -o bin/hero-zygote lib/sandbox/zygote/zygote.c \
		|| echo "no bin/hero-zygote (no C compiler?): the runner makes a bwrap sandbox per job (docs/security.md)"

.PHONY: deps
deps: ## install what the tests need (redis-server, redis-sentinel, bubblewrap, slirp4netns, iproute2, python3-cryptography, chromium for the console's browser test) when missing
	@scripts/deps.sh redis-server redis-sentinel bwrap slirp4netns ip python3-cryptography chromium

# The suite runs through testrun (lib/testutil/cmd/testrun): every command to its end
# even when one fails, a line per package as it ends, a failed test's output when it
# fails, a progress line a minute for a package still running, and a closing summary
# (what failed, the slowest tests, the time); exit 1 when anything failed.
# docs/testing.md describes the suite.
TEST_J ?= 3#              testrun commands at once
TEST_P ?= 2#              packages at once within a command (go test -p)
TEST_JSON ?=#             a directory: keep each command's go test -json stream there
TESTRUN = $(GO) run ./lib/testutil/cmd/testrun -j $(TEST_J) $(if $(TEST_JSON),-json-dir $(TEST_JSON))
# 'LABEL: COMMAND' for testrun: module $(1)'s tests.
test_module = '$(1): cd $(1) && $(GO) test -json $(TEST_FLAGS) -p $(TEST_P) ./...'
# The e2e package runs as two commands side by side, its tests split by name into
# halves of about the same time (docs/testing.md); the rest of the modules and the
# e2e suite's other Redis modes run beside them, the longest first.
E2E_HALF := ^Test[A-O]

.PHONY: test
test: deps ## every module's tests (with -race, against a real redis-server) and the e2e suite again over TLS with ACL users and on two Redis servers; a line per package, a summary at the end
	@CORE_TESTS='$(CORE_TESTS)' PLACED_TESTS='$(PLACED_TESTS)' E2E_HALF='$(E2E_HALF)' $(TESTRUN) \
		'e2e A-O: cd tests/e2e && $(GO) test -json $(TEST_FLAGS) -run "$$E2E_HALF" ./' \
		'e2e P-Z: cd tests/e2e && $(GO) test -json $(TEST_FLAGS) -skip "$$E2E_HALF" ./' \
		$(call test_module,lib) \
		'e2e placed: cd tests/e2e && HERO_E2E_REDIS=placed $(GO) test -json $(TEST_FLAGS) -run "$$PLACED_TESTS" ./' \
		'e2e secure: cd tests/e2e && HERO_E2E_REDIS=secure $(GO) test -json $(TEST_FLAGS) -run "$$CORE_TESTS" ./' \
		$(foreach m,$(filter-out lib tests/e2e,$(MODULES)),$(call test_module,$(m)))

.PHONY: test-quick
test-quick: deps ## unit and store tests while you work: every module but tests/e2e, -short (the few long ones skip), without -race
	@$(TESTRUN) $(foreach m,$(filter-out tests/e2e,$(MODULES)),'$(m): cd $(m) && $(GO) test -json -count=1 -short -timeout 10m -p $(TEST_P) ./...')

# The heavy scale and soak tests, kept out of make test (they skip there): each
# checks a property of many flows or many contexts at once, not one behaviour.
LONG_TESTS := ^(TestChaos|TestIdleCostFlat|TestReplicasKillOneOfEach)$$

.PHONY: test-long
test-long: deps ## heavy scale and soak tests kept out of make test (HERO_LONG=1: the chaos suite's short mode, 200 idle contexts, replicas killed under load); make chaos is the chaos suite's long mode
	@LONG_TESTS='$(LONG_TESTS)' $(TESTRUN) \
		'tests/e2e long: cd tests/e2e && HERO_LONG=1 $(GO) test -json $(TEST_FLAGS) -run "$$LONG_TESTS" ./'

.PHONY: fuzz
fuzz: ## short bounded fuzz runs of the RRQ frame decoder and of its payload decoders against encoding/json, of the Go client's submission-answer decoder and of the server's submission-request decoder against proto
	@# A count, not a duration: Go 1.26's fuzz coordinator can report a spurious
	@# "context deadline exceeded" when a -fuzztime duration ends (go.dev/issue/75804).
	@cd lib && $(GO) test -run '^$$' -fuzz FuzzReadFrame -fuzztime $${FUZZTIME:-500000x} ./rrq
	@cd lib && $(GO) test -run '^$$' -fuzz FuzzFastDecode -fuzztime $${FUZZTIME:-500000x} -fuzzminimizetime 1000x ./rrq
	@cd sdk/go && $(GO) test -run '^$$' -fuzz FuzzDecodeAnswers -fuzztime $${FUZZTIME:-500000x} -fuzzminimizetime 1000x .
	@cd services/supervisor-daemon && $(GO) test -run '^$$' -fuzz FuzzDecodeRequests -fuzztime $${FUZZTIME:-500000x} -fuzzminimizetime 1000x .

.PHONY: lint
lint: ## gofmt, go vet, protos current, each module builds on its own (GOWORK=off), Lua scripts in .lua files with headers (scripts/lua-check.sh, itself tested by scripts/lua-check-test.sh), dependencies where they belong (scripts/deps-check.sh), no file of services/supervisor-daemon over 600 lines (scripts/size-check.sh), no function over MAX_CYCLO
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@set -e; for m in $(MODULES); do echo "== vet $$m"; (cd $$m && $(GO) vet ./...); done
	@set -e; for m in $(MODULES); do echo "== tidy, GOWORK=off build $$m"; \
		(cd $$m && $(GO) mod tidy -diff >/dev/null || { echo "$$m: go.mod/go.sum not tidy; run go mod tidy there"; exit 1; }; \
		 GOWORK=off $(GO) build ./...); done
	@$(MAKE) --no-print-directory proto-check
	@$(MAKE) --no-print-directory lua-gen-check
	@bash scripts/lua-check-test.sh
	@bash scripts/lua-check.sh
	@bash scripts/deps-check.sh
	@bash scripts/size-check.sh
	@$(MAKE) --no-print-directory cyclo

.PHONY: cyclo
cyclo: ## fail when a function has a cyclomatic complexity over MAX_CYCLO (files marked "Code generated ... DO NOT EDIT." aside)
	@test -x $(GOBIN)/gocyclo && $(GO) version -m $(GOBIN)/gocyclo | grep -q 'mod.*github.com/fzipp/gocyclo.*$(GOCYCLO_VERSION)' || \
		$(GO) install github.com/fzipp/gocyclo/cmd/gocyclo@$(GOCYCLO_VERSION)
	@gen=$$(grep -rlE --include='*.go' '^// Code generated .* DO NOT EDIT\.$$' $(MODULES) helm/chart-test | sed 's/[.]/\\./g' | paste -sd'|'); \
	out=$$($(GOBIN)/gocyclo -over $(MAX_CYCLO) -ignore "^($${gen:-\.pb\.go})$$" $(MODULES) helm/chart-test); \
		if [ -n "$$out" ]; then echo "cyclo: functions over $(MAX_CYCLO) (split them into named helpers or subtests):"; \
		echo "$$out" | sort -rn; exit 1; fi; echo "cyclo: no function over $(MAX_CYCLO)"

.PHONY: proto
proto: proto-tools ## regenerate the gRPC code from proto/
	@cd proto && PATH="$(GOBIN):$$PATH" protoc -I . \
		--go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative \
		hero/v1/*.proto
	@echo "proto: generated"

.PHONY: proto-check
proto-check: proto-tools ## fail when the committed generated code is not what `make proto` makes
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	cd proto && PATH="$(GOBIN):$$PATH" protoc -I . \
		--go_out=$$tmp --go_opt=paths=source_relative \
		--go-grpc_out=$$tmp --go-grpc_opt=paths=source_relative \
		hero/v1/*.proto && \
	for f in $$(cd $$tmp && find . -name '*.go'); do \
		diff -q $$tmp/$$f $$f >/dev/null || { echo "proto: $$f is stale; run make proto"; exit 1; }; \
	done; echo "proto: generated code is current"

# LUAGEN runs the generator of the Lua scripts' typed calls (lib/internal/luagen) on a
# package's lua/ directory: the prologue in each script file and the package's lua_gen.go
# (LUAGEN_PKGS: <lua dir>:<Go file>:<package>:<its type of one script run>[:<the
# table of small counts its scripts see, lib/store/script.go's COUNT>]).
LUAGEN = cd lib && $(GO) run ./internal/luagen/cmd/luagen
LUAGEN_PKGS = store/lua:store/lua_gen.go:store:Call:COUNT dispatcher/worker/lua:dispatcher/worker/lua_gen.go:worker:luaCall

.PHONY: lua-gen
lua-gen: ## regenerate, from each Lua script's declared header, its Lua prologue and the typed Go calls (lib/store/lua_gen.go, lib/dispatcher/worker/lua_gen.go)
	@set -e; for p in $(LUAGEN_PKGS); do IFS=: read -r dir out pkg call counts <<<"$$p"; ($(LUAGEN) -dir $$dir -out $$out -package $$pkg -call $$call -counts "$$counts"); done
	@echo "lua-gen: generated"

.PHONY: lua-gen-check
lua-gen-check: ## fail when a Lua script's prologue or the typed Go calls are not what `make lua-gen` makes
	@set -e; for p in $(LUAGEN_PKGS); do IFS=: read -r dir out pkg call counts <<<"$$p"; ($(LUAGEN) -dir $$dir -out $$out -package $$pkg -call $$call -counts "$$counts" -check); done
	@echo "lua-gen: generated code is current"

.PHONY: proto-tools
proto-tools:
	@scripts/deps.sh protoc
	@test -x $(GOBIN)/protoc-gen-go && $(GOBIN)/protoc-gen-go --version | grep -q $(PROTOC_GEN_GO_VERSION) || \
		$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@test -x $(GOBIN)/protoc-gen-go-grpc && $(GOBIN)/protoc-gen-go-grpc --version | grep -q $(PROTOC_GEN_GO_GRPC_VERSION:v%=%) || \
		$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

.PHONY: bench-peers
bench-peers: deps ## asynq (defaults, and tuned: PEERS_POLL=10ms) and this stack side by side, in turn, with equal settings (ROUNDS=3, PEERS_N=20000, PEERS_C=32, PEERS_WORKERS=32, PEERS_WARMUP=1000, PEERS_GOMAXPROCS=1, PEERS_SIDES=asynq,hero,asynq10); docs/benchmarks.md
	@cd bench/peers && GOWORK=off $(GO) run . -rounds $${ROUNDS:-3} -n $${PEERS_N:-20000} -c $${PEERS_C:-32} \
		-workers $${PEERS_WORKERS:-32} -warmup $${PEERS_WARMUP:-1000} -gomaxprocs $${PEERS_GOMAXPROCS:-1} -poll $${PEERS_POLL:-10ms} \
		-sides $${PEERS_SIDES:-asynq,hero,asynq10}

.PHONY: bench
bench: deps build ## run the benchmarks (not part of make test)
	@cd tests/e2e && HERO_BENCH=1 $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./...
	@cd lib && HERO_BENCH=1 $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./store/...
	@cd lib && $(GO) test -run '^$$' -bench . -benchtime 2s ./rrq/...

.PHONY: chaos
chaos: deps ## the chaos suite, long mode (HERO_CHAOS_FLOWS flows, default 300; its short mode is part of make test)
	@set -o pipefail; cd tests/e2e && HERO_CHAOS=long $(GO) test -count=1 -timeout 60m -run '^TestChaos$$' -v ./ 2>&1 | \
		grep -v '^redis: ' | sed -n '/==== chaos/,/^--- /p;/^FAIL/p;/^ok/p'

.PHONY: helm-check
helm-check: ## helm lint, render every scenario, validate the manifests strictly offline
	@bash scripts/helm-check.sh

.PHONY: clean
clean: ## remove build outputs
	rm -rf bin

.PHONY: compose-two-nodes-test
compose-two-nodes-test: build ## deploy/compose/two-nodes.yml end to end: two nodes over an emulated Mycelium (needs Docker; after compose-test)
	@bash scripts/compose-two-nodes-test.sh

.PHONY: compose-test
compose-test: build ## docker-compose.yml end to end: the README's compose quickstart line by line, then flows, runner kill, Redis restart, Prometheus (needs Docker)
	@bash scripts/compose-test.sh

.PHONY: quickstart-test
quickstart-test: ## the README's local quickstart, its lines run as they are in a fresh clone (needs the ports of scripts/local-stack.sh free)
	@bash scripts/quickstart-test.sh
