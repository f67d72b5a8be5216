# cfgd: the two commands that matter are `make run` and `make test`.
GO       ?= go
DATA_DIR ?= $(CURDIR)/data
BIN      := $(CURDIR)/bin/cfgd
export CFGD_DATA_DIR := $(DATA_DIR)
export KAFKA__DATA_DIR ?= $(DATA_DIR)/kafka

.PHONY: all build run test test-short test-cluster test-upgrade chaos bench bench-ingest bench-serve soak bench-replay bench-replay-clickhouse bench-replay-postgres mutate proto protos-release stack-up stack-down stack-status migrate lint fmt clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/cfgd

## stack-up: install (apt) and start Postgres, ClickHouse and Redis on loopback, data under ./data
stack-up:
	deploy/scripts/local/stack.sh up

stack-down:
	deploy/scripts/local/stack.sh down

stack-status:
	deploy/scripts/local/stack.sh status

migrate: stack-up build
	$(BIN) migrate

## run: local stack + migrations + cfgd serve (embedded Kafka), prints where to go
run: stack-up build
	$(BIN) migrate
	$(BIN) serve

## test: local stack + every test with the race detector
test: stack-up
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...

## test-cluster: ZooKeeper + four ClickHouse 18.16 servers as cluster `cfgd` (2 shards x 2 replicas,
## deploy/scripts/cluster), the tests behind the `cluster` build tag (one package at a time: they kill
## and hold the same servers, and a server killed during an ON CLUSTER statement (migrate, replay) can
## end its 18.16 DDL worker, which later ON CLUSTER statements would wait for), then the cluster stopped
test-cluster: stack-up
	deploy/scripts/cluster/cluster.sh up
	$(GO) test -tags cluster -count=1 -p 1 -timeout 10m -run Cluster ./cmd/cfgd/schemas/ ./cmd/cfgd/ ./cmd/cfgd/faults/ ./projections/sinks/; \
		rc=$$?; deploy/scripts/cluster/cluster.sh down; exit $$rc

## test-upgrade: an older build (UPGRADE_FROM=<git revision>, default the last release in docs/changelog.md),
## built from this repository's history, upgraded to this tree under load: docs/upgrading.md
UPGRADE_FROM ?=
test-upgrade: stack-up
	UPGRADE_FROM=$(UPGRADE_FROM) GO=$(GO) deploy/scripts/upgrade/run.sh

## chaos: cfgd as docs/scaling.md deploys it (cfgd broker, 2 serve, 1 worker, a ClickHouse cluster of
## 2 shards x 2 replicas with ZooKeeper, its own Postgres and Redis; ports from CHAOS_PORT_BASE, 17000;
## data under ./data/chaos/<seed>) under load while a nemesis drawn from CHAOS_SEED (default random,
## printed) kills and pauses its processes for CHAOS_DURATION; then a checker against the ledger of
## what was acknowledged (cmd/chaos, docs/testing.md#chaos)
## (stack-up installs the Debian packages of Postgres, Redis and ClickHouse it starts its own instances of;
## cluster.sh installs ZooKeeper)
CHAOS_SEED      ?=
CHAOS_DURATION  ?= 10m
CHAOS_PORT_BASE ?= 17000
chaos: stack-up build
	CHAOS_SEED=$(CHAOS_SEED) CHAOS_DURATION=$(CHAOS_DURATION) CHAOS_PORT_BASE=$(CHAOS_PORT_BASE) $(GO) run ./cmd/chaos -cfgd $(BIN)

test-short: stack-up
	$(GO) test -count=1 ./...

## bench: benchmarks with their same-run baselines (see README, Performance)
bench: stack-up
	@if [ -x deploy/scripts/bench/run.sh ]; then deploy/scripts/bench/run.sh; else $(GO) test -run '^$$' -bench . -benchtime 3s ./...; fi

## mutate: mutation testing of events/, projections/, commands/ (gremlins); fails on a survivor not in deploy/scripts/mutate/accepted.txt
mutate: stack-up
	deploy/scripts/mutate/run.sh

## proto: regenerate the Go code of api/protos with protoc (Debian protobuf-compiler) and the pinned plugins
proto:
	@command -v protoc >/dev/null || deploy/scripts/local/stack.sh up
	api/protos/generate.sh

## lint: gofmt, go vet, no dead code (deadcode: functions that neither a main nor a test reaches; both with
## the `cluster` tag, so make test-cluster's tests are checked too),
## docs/openapi.yaml through Redocly's linter (rules in docs/redocly.yaml; nodejs and npm from apt when missing),
## and buf breaking: no breaking change to the public protos since the last release
DEADCODE := golang.org/x/tools/cmd/deadcode@v0.52.0
# 1.34.x: the last line that runs on Debian 12's Node 18 as well as on Node 20 (2.x needs Node >= 20.19).
REDOCLY  := @redocly/cli@1.34.20
# buf from npm (a prebuilt binary; building it with go run takes minutes): refuses a breaking change to the
# public protos against the image of the last release (api/protos/releases, written by make protos-release)
BUF      := @bufbuild/buf@1.75.0
RELEASE  := $(shell sed -n 's/^const Release = "\(.*\)"/\1/p' deploy/buildinfo/buildinfo.go)
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet -tags cluster,upgrade ./...
	@dead="$$($(GO) run $(DEADCODE) -test -tags cluster,upgrade ./...)"; test -z "$$dead" || { echo "dead code:"; echo "$$dead"; exit 1; }
	@command -v npx >/dev/null || { echo "lint: installing nodejs npm (apt-get)"; \
		sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); $$sudo apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; }
	REDOCLY_TELEMETRY=off NO_UPDATE_NOTIFIER=1 npx --yes $(REDOCLY) lint --config docs/redocly.yaml docs/openapi.yaml
	cd api/protos && NO_UPDATE_NOTIFIER=1 npx --yes $(BUF) breaking . --against releases/v$(RELEASE).binpb

## protos-release: the image of the public protos that later changes are checked against (make lint), for the
## release in deploy/buildinfo (run when cutting a release, see docs/upgrading.md)
protos-release:
	cd api/protos && NO_UPDATE_NOTIFIER=1 npx --yes $(BUF) build . -o releases/v$(RELEASE).binpb

fmt:
	gofmt -w .

clean:
	rm -rf bin

## bench-ingest: request-log ingest and query benchmark with same-run baselines (BENCH_INGEST_ARGS="-events 12000000 -query-rows 10000000")
BENCH_INGEST_ARGS ?=
bench-ingest: stack-up
	$(GO) run ./cmd/loadgen $(BENCH_INGEST_ARGS)

## bench-serve: a real cfgd serve (embedded broker, databases of its own, default settings) fed unpaced through
## each ingest path in turn (REST JSON, gRPC, OTLP/HTTP protobuf, OTLP/gRPC; a fresh serve each), events/s until
## queryable against the direct insert of as many events, alternating rounds, medians, and serve's peak RSS
## against the 300 MB goal (BENCH_SERVE_ARGS="-events 1500000 -rounds 3 -serve-paths rest,grpc")
BENCH_SERVE_ARGS ?=
bench-serve: stack-up build
	$(GO) run ./cmd/loadgen -serve -cfgd $(BIN) $(BENCH_SERVE_ARGS)

## soak: one serve (embedded broker) and one worker on the local stack for SOAK_DURATION at half the
## ingest rate an unpaced REST burst measures, with sign-ins, API keys and tasks beside; samples every 10 s,
## writes ./data/soak/<time>/ (samples.csv, a PNG per series, summary.txt) and fails on a series still
## growing over the second half, or a retention or idempotency sweep not on time (docs/testing.md, Soak)
SOAK_DURATION ?= 30m
SOAK_ARGS     ?=
soak: stack-up build
	$(GO) run ./cmd/soak -cfgd $(BIN) -duration $(SOAK_DURATION) -out $(DATA_DIR)/soak $(SOAK_ARGS)

## bench-replay: both replay benchmarks below, each next to its raw read of the same log
bench-replay: bench-replay-postgres bench-replay-clickhouse

## bench-replay-postgres: 1M domain events replayed into every Postgres read model, next to the raw read of the same log (CFGD_BENCH_REPLAY_EVENTS=..., BENCH_REPLAY_ROUNDS=3)
BENCH_REPLAY_ROUNDS ?= 3
bench-replay-postgres: stack-up
	$(GO) test -run '^$$' -bench BenchmarkReplayPostgres -benchtime $(BENCH_REPLAY_ROUNDS)x -timeout 60m ./projections/replay/

## bench-replay-clickhouse: replay of N request-log events into ClickHouse against the raw consume rate of the same topic, alternating rounds, medians (BENCH_REPLAY_EVENTS=2000000 for a quicker run)
BENCH_REPLAY_EVENTS ?= 10000000
bench-replay-clickhouse: stack-up
	$(GO) run ./cmd/loadgen -replay -events $(BENCH_REPLAY_EVENTS) -rounds 3
