# Two commands for a newcomer: `make run` and `make test`. See README.md.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PG_URL = $(shell scripts/pg.sh url)
TEST_REDIS = $(shell scripts/redis.sh url)

.PHONY: run run-example serve migrate test test-unit test-sqlite chaos soak soak-short lint format bench bench-send bench-cluster bench-push \
	bench-quick bench-scale clean services-stop \
	cluster cluster-stop upgrade-check

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.test-installed: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install -q -e '.[test]'
	touch $@

## Serve the agent on the embedded default: SQLite under ./data, in-process bus. Bound to loopback (the
## default HOST) and with no AUTH_MODE given, authentication is off; its start-up line says which is in force.
## No gRPC unless GRPC_PORT is given: a card that lists a gRPC `host:port` is refused by Google ADK's
## RemoteA2aAgent (every interface must share the card's origin), so the first run serves JSON-RPC and REST.
LOOPBACK_AUTH = AUTH_MODE=$${AUTH_MODE:-$$(case "$${HOST:-127.0.0.1}" in 127.*|localhost|::1) echo off;; *) echo required;; esac)}
LOCAL_GRPC = GRPC_PORT=$${GRPC_PORT:-0}
run: $(VENV)/.installed migrate
	$(LOOPBACK_AUTH) $(LOCAL_GRPC) $(BIN)/a2a-server serve

## The example agent of "Write your own agent" in docs/agents.md, served the same way.
run-example: $(VENV)/.installed migrate
	$(LOOPBACK_AUTH) $(LOCAL_GRPC) AGENT_ADAPTER=examples.release_notes:ReleaseNotesAgent $(BIN)/a2a-server serve

migrate: $(VENV)/.installed
	$(BIN)/a2a-server migrate

## Install test needs, start a throwaway PostgreSQL and Redis on loopback (nginx and Prometheus installed for
## the cluster tests, bubblewrap for the coding agents' jail, Debian's chromium for the console's browser tests; the
## pinned coding-agent CLIs from npm into .cache/cli; the agent frameworks' venvs into .cache/frameworks), run the suite on SQLite and PostgreSQL in four pytest-xdist
## workers (tests/support/parallel.py; the cluster tests, the soak's short form among them, one after another in
## two of them, in halves of about equal time). `PYTEST_XDIST=` runs it in one process.
PYTEST_XDIST ?= -n 4
test: $(VENV)/.test-installed
	scripts/pg.sh start
	scripts/redis.sh start
	scripts/install-deb.sh nginx nginx
	scripts/install-deb.sh prometheus prometheus
	scripts/install-deb.sh bwrap bubblewrap
	scripts/install-deb.sh chromium chromium
	scripts/install-clis.sh
	scripts/install-frameworks.sh
	SOAK_SHORT=1 TEST_POSTGRES_URL=$(PG_URL) TEST_REDIS_URL=$(TEST_REDIS) \
		$(BIN)/python -m pytest -q $(PYTEST_XDIST) $(PYTEST_ARGS)

## The in-process tests only (marker `unit`: the room folders of tests/, see docs/testing.md), in under a
## minute right after cloning: SQLite only, no PostgreSQL, Redis or server process (their cases skip).
test-unit: $(VENV)/.test-installed
	env -u TEST_POSTGRES_URL -u TEST_REDIS_URL $(BIN)/python -m pytest -q -m unit $(PYTEST_ARGS)

## Leases under chaos at scale (tests/cluster/test_chaos_leases.py, about 25 minutes): 10 runs of 60
## streaming tasks, each with a replica killed and restarted, Redis stopped and started, PostgreSQL down 30 s
## with a live replica frozen until the reapers mark its leases; then the variant (a replica restarting as
## PostgreSQL returns); then 4 runs of 18 CLI tasks keeping checkpoints, whose killed replica's tasks must
## complete elsewhere. `make test` runs one short run of each. Figures per run are printed; the replicas'
## logs stay under $(CHAOS_DIR) (emptied at the start).
CHAOS_TASKS ?= 60
CHAOS_RUNS ?= 10
CHAOS_PG_DOWN_S ?= 30
CHAOS_CLI_TASKS ?= 18
CHAOS_CLI_RUNS ?= 4
CHAOS_DIR ?= /tmp/a2a-chaos
chaos: $(VENV)/.test-installed
	scripts/pg.sh start
	scripts/redis.sh start
	scripts/install-deb.sh nginx nginx
	CHAOS_TASKS=$(CHAOS_TASKS) CHAOS_RUNS=$(CHAOS_RUNS) CHAOS_PG_DOWN_S=$(CHAOS_PG_DOWN_S) \
		CHAOS_CLI_TASKS=$(CHAOS_CLI_TASKS) CHAOS_CLI_RUNS=$(CHAOS_CLI_RUNS) \
		TEST_POSTGRES_URL=$(PG_URL) TEST_REDIS_URL=$(TEST_REDIS) \
		$(BIN)/python -m pytest -q -s --basetemp=$(CHAOS_DIR) tests/cluster/test_chaos_leases.py $(PYTEST_ARGS)

## The soak (bench/soak.py, docs/testing.md): an hour of steady mixed load on both protocol versions (blocking
## sends, streams, resumes with Last-Event-ID, answers, cancels, webhooks, ListTasks, the console's polling)
## through nginx to 3 replicas and a remote worker, on a PostgreSQL and a Redis of its own, with a fault every
## 5 minutes in turn: a replica killed, Redis restarted, PostgreSQL restarted, PostgreSQL down 30 s, the worker
## killed, nginx reloaded. Prints a table per window and the targets, MET / NOT MET (exit 1 if one is not);
## report.json and every process's log stay under $(SOAK_DIR) (emptied at the start). SOAK_ARGS passes flags
## (`--duration-min`, `--fault-every-s`, `--pg-down-s`, `--baseline-min`, `--clients`, `--help`); `make
## soak-short` runs a short form.
SOAK_DIR ?= /tmp/a2a-soak
soak: $(VENV)/.test-installed
	scripts/install-deb.sh nginx nginx
	$(BIN)/python -m bench.soak --duration-min 60 --fault-every-s 300 --workdir $(SOAK_DIR) $(SOAK_ARGS)

## The soak's short form as a test (tests/cluster/test_soak.py, about 4.5 minutes: six windows of 37 s, each
## fault once), every target asserted MET; alone. `make test` runs it too (with the cluster tests).
soak-short: $(VENV)/.test-installed
	scripts/pg.sh start
	scripts/redis.sh start
	scripts/install-deb.sh nginx nginx
	SOAK_SHORT=1 TEST_POSTGRES_URL=$(PG_URL) TEST_REDIS_URL=$(TEST_REDIS) \
		$(BIN)/python -m pytest -q -s tests/cluster/test_soak.py $(PYTEST_ARGS)

## Upgrades without downtime (docs/operations.md): the previous release of RELEASES (its own code and venv,
## made once under .cache/releases/) and this code on one PostgreSQL database behind nginx, the migrations run
## under load, sends, streams and answers across both versions, then the roll. `make test` runs it too
## (tests/cluster/test_upgrade.py). Its own Redis on $(UPGRADE_REDIS_PORT) (pub/sub is server-wide), stopped
## afterwards unless it was already running.
UPGRADE_REDIS_PORT ?= 63792
upgrade-check: $(VENV)/.installed
	scripts/pg.sh start
	scripts/install-deb.sh nginx nginx
	REDIS_PORT=$(UPGRADE_REDIS_PORT) scripts/redis.sh status >/dev/null 2>&1; up=$$?; \
	REDIS_PORT=$(UPGRADE_REDIS_PORT) scripts/redis.sh start || exit 1; \
	$(BIN)/python -m scripts.upgrade_check --database-url $(PG_URL) \
		--redis-url redis://127.0.0.1:$(UPGRADE_REDIS_PORT)/0 $(UPGRADE_ARGS); s=$$?; \
	[ $$up = 0 ] || REDIS_PORT=$(UPGRADE_REDIS_PORT) scripts/redis.sh stop; exit $$s

lint: $(VENV)/.test-installed
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

format: $(VENV)/.test-installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## The benchmarks: two beside the official SDK's reference server, then push delivery (about 12 minutes);
## each also runs alone.
bench: $(VENV)/.test-installed
	$(MAKE) --no-print-directory bench-send; s=$$?; $(MAKE) --no-print-directory bench-cluster || s=1; \
	$(MAKE) --no-print-directory bench-push || s=1; exit $$s

## The same with short points (a few minutes): BENCH_ARGS / BENCH_CLUSTER_ARGS / BENCH_PUSH_ARGS still apply.
bench-quick: $(VENV)/.test-installed
	$(MAKE) --no-print-directory bench BENCH_ARGS="--duration 3 --warmup 1 --retries 0 --quiet-wait 10 $(BENCH_ARGS)" \
		BENCH_CLUSTER_ARGS="--quick $(BENCH_CLUSTER_ARGS)" BENCH_PUSH_ARGS="--quick $(BENCH_PUSH_ARGS)"

## Push notifications: deliveries per second to a fast local receiver, and message/send latency with and
## without a webhook that takes 10 s to answer, side by side.
bench-push: $(VENV)/.test-installed
	scripts/pg.sh start
	BENCH_POSTGRES_URL=$(PG_URL) $(BIN)/python -m bench.push $(BENCH_PUSH_ARGS)

## Blocking message/send throughput and latency, one server at a time: ours on PostgreSQL (one worker and
## WORKERS=2, on its own Redis), ours on SQLite, the official JS SDK's server and a2a-sdk's, with the targets.
bench-send: $(VENV)/.test-installed
	scripts/pg.sh start
	REDIS_PORT=$(BENCH_REDIS_PORT) scripts/redis.sh status >/dev/null 2>&1; up=$$?; \
	REDIS_PORT=$(BENCH_REDIS_PORT) scripts/redis.sh start || exit 1; \
	BENCH_POSTGRES_URL=$(PG_URL) BENCH_REDIS_URL=redis://127.0.0.1:$(BENCH_REDIS_PORT)/0 \
		$(BIN)/python -m bench.send --workers 2 $(BENCH_ARGS); s=$$?; \
	[ $$up = 0 ] || REDIS_PORT=$(BENCH_REDIS_PORT) scripts/redis.sh stop; exit $$s

## Cost that does not grow with the data: the same requests on an empty and a grown database (1 M tasks,
## 6 M events, 50 long sessions; generated with SQL); BENCH_SCALE_ARGS="--quick" for about 100,000 tasks.
bench-scale: $(VENV)/.test-installed
	scripts/pg.sh start
	BENCH_POSTGRES_URL=$(PG_URL) $(BIN)/python -m bench.scale $(BENCH_SCALE_ARGS)

## Scale-out: cross-replica propagation, throughput by replicas, streamed events/s, 10,000 open streams.
## Its own Redis on $(BENCH_REDIS_PORT) (pub/sub channels are server-wide, so a test cluster on the test
## Redis would hear the bench's), stopped afterwards unless it was already running.
BENCH_REDIS_PORT ?= 63791
bench-cluster: $(VENV)/.test-installed
	scripts/pg.sh start
	scripts/install-deb.sh nginx nginx
	REDIS_PORT=$(BENCH_REDIS_PORT) scripts/redis.sh status >/dev/null 2>&1; up=$$?; \
	REDIS_PORT=$(BENCH_REDIS_PORT) scripts/redis.sh start || exit 1; \
	BENCH_POSTGRES_URL=$(PG_URL) BENCH_REDIS_URL=redis://127.0.0.1:$(BENCH_REDIS_PORT)/0 \
		$(BIN)/python -m bench.cluster $(BENCH_CLUSTER_ARGS); s=$$?; \
	[ $$up = 0 ] || REDIS_PORT=$(BENCH_REDIS_PORT) scripts/redis.sh stop; exit $$s

## Scaled out on loopback: PostgreSQL, Redis, $(CLUSTER_REPLICAS) replicas, nginx on :$(CLUSTER_PORT), Prometheus
## scraping every replica on :$(CLUSTER_PROMETHEUS_PORT) (CLUSTER_ARGS=--no-prometheus leaves it out); Ctrl-C stops it.
CLUSTER_REPLICAS ?= 3
CLUSTER_PORT ?= 8080
CLUSTER_PROMETHEUS_PORT ?= 9090
cluster: $(VENV)/.installed
	$(LOOPBACK_AUTH) $(BIN)/python -m scripts.cluster run --replicas $(CLUSTER_REPLICAS) --port $(CLUSTER_PORT) \
		--prometheus-port $(CLUSTER_PROMETHEUS_PORT) $(CLUSTER_ARGS)

## Stop a `make cluster` running elsewhere (another terminal, or in the background).
cluster-stop: $(VENV)/.installed
	$(BIN)/python -m scripts.cluster stop --port $(CLUSTER_PORT)

services-stop:
	scripts/pg.sh stop
	scripts/redis.sh stop

clean:
	rm -rf $(VENV) data .pytest_cache .ruff_cache
