# Two commands for a newcomer: `make run` and `make test`. See README.md.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PG_URL = $(shell scripts/pg.sh url)

.PHONY: run serve migrate test test-sqlite lint format bench clean services-stop

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.test-installed: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install -q -e '.[test]'
	touch $@

## Serve the agent on the embedded default: SQLite under ./data, in-process bus.
run: $(VENV)/.installed migrate
	$(BIN)/a2a-server serve

migrate: $(VENV)/.installed
	$(BIN)/a2a-server migrate

## Install test needs, start a throwaway PostgreSQL on loopback, run the suite on SQLite and PostgreSQL.
test: $(VENV)/.test-installed
	scripts/pg.sh start
	TEST_POSTGRES_URL=$(PG_URL) $(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: $(VENV)/.test-installed
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

format: $(VENV)/.test-installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## Blocking message/send throughput and latency beside the official SDK's reference server.
bench: $(VENV)/.test-installed
	scripts/pg.sh start
	BENCH_POSTGRES_URL=$(PG_URL) $(BIN)/python -m bench.send $(BENCH_ARGS)

services-stop:
	scripts/pg.sh stop

clean:
	rm -rf $(VENV) data .pytest_cache .ruff_cache
