# Everything sets itself up: a virtual environment in .venv with the collector, dev, dask and
# analysis extras (the tests run the aggregation job on a local Dask cluster, and the example
# notebook on pandas).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

# pip installs uv, and uv the rest: on a fresh clone 22 s against pip's 99 (19 against 78 s
# of CPU), the same packages from the same index.
UV := 'uv>=0.5'
UV_PIP := $(BIN)/uv pip install --quiet --python $(BIN)/python

BENCH_STAMP := $(VENV)/.bench-stamp
DEMO_STAMP := $(VENV)/.demo-stamp

.PHONY: demo serve-demo test quick lint bench clean services client-ts

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(UV)
	$(UV_PIP) -e '.[collector,dev,postgresql,dask,analysis]'
	# The editable install's import hook is invisible to type checkers: list the three
	# source roots in a .pth too, so a user's mypy sees chorus_client and the rest.
	$(BIN)/python -c "import pathlib, sysconfig; root = pathlib.Path('.').resolve(); \
	  (pathlib.Path(sysconfig.get_paths()['purelib']) / 'chorus-ldp-sources.pth').write_text( \
	  ''.join(f'{root / d}\n' for d in ('client', 'collector', 'shared')))"
	touch $(STAMP)

# The demo needs the collector alone, not the test toolchain: on a fresh clone `make demo`
# installs only that extra (a later `make test` adds the rest to the same .venv, and a .venv
# set up for the tests serves the demo as it is). Each step says what it does, in a log too.
$(DEMO_STAMP): pyproject.toml
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then touch $@; exit 0; fi; \
	echo "setting up $(VENV) with the collector's dependencies (flask, numpy, scipy, gunicorn; about half a minute) ..."; \
	start=$$(date +%s); \
	$(PYTHON) -m venv $(VENV) && \
	$(BIN)/python -m pip install --quiet $(UV) && \
	$(UV_PIP) -e '.[collector]' && \
	echo "set up in $$(( $$(date +%s) - start )) s" && touch $@

# The demo ends by itself (it prints the dashboard's address and how to keep it running) and
# keeps its database in .demo/; serve-demo serves that database (simulating only if there is
# none, or one of another version) on loopback until Ctrl-C.
demo: $(DEMO_STAMP)
	$(BIN)/chorus demo

serve-demo: $(DEMO_STAMP)
	$(BIN)/chorus demo --serve

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# The real components the tests run, from Debian: PostgreSQL's server binaries (the suite's
# second backend; the tests start a throwaway cluster as the postgres user on 127.0.0.1),
# nginx (the deployment's proxy, started by the tests on 127.0.0.1) and Chromium with its
# WebDriver (the browser tests drive it headless through Playwright, which never downloads a
# browser of its own; its bundled Node.js driver needs libatomic1, absent where no compiler
# is installed). Each stops at the end. Installing them all takes under a minute.
services:
	@{ ls /usr/lib/postgresql/*/bin/pg_ctl && command -v nginx && command -v chromium && \
	  command -v chromedriver && dpkg -s libatomic1; } >/dev/null 2>&1 || { \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql nginx \
	    chromium chromium-driver libatomic1 >/dev/null; }

# The TypeScript client (client-ts/): its devDependencies once from the committed lockfile
# (npm ci again only when the lockfile changes), then its type check and build into the
# ignored client-ts/dist/ and its own tests on Node's test runner (a few seconds in all).
# tests/client_ts/ checks its samplers against the Python mechanisms inside pytest.
TS_STAMP := client-ts/node_modules/.ci-stamp

$(TS_STAMP): client-ts/package-lock.json
	cd client-ts && npm ci --no-audit --no-fund --loglevel=error
	touch $(TS_STAMP)

client-ts: $(TS_STAMP)
	cd client-ts && npm test --silent

# pytest-xdist: a worker per core (PYTEST_XDIST_AUTO_NUM_WORKERS=N to choose), each taking
# a contiguous run of the tests and stealing from the others when done (worksteal keeps module
# fixtures together and, unlike loadfile or loadgroup, runs tests sharing a node ID, as
# schemathesis's do, every one).
XDIST := -n logical --dist worksteal

# The suites the PostgreSQL pass picks its tests from (BACKEND_SUITES in tests/conftest.py).
PG_SUITES := tests/collector tests/e2e

# The tests start hundreds of Python processes (servers, their workers, commands, benchmarks),
# each importing numpy, scipy, Flask and the collector: with PYTHONDONTWRITEBYTECODE set (as it
# is on some machines, CI's among them) every one compiled every module from source again, and
# every pytest process rewrote every test module's asserts. Cleared for the tests, the first
# import writes the bytecode (into the ignored __pycache__ folders) and the rest load it: an
# end-to-end test file took 31 s of CPU instead of 37.
test quick: export PYTHONDONTWRITEBYTECODE :=

# Everything on SQLite and, at the same time, the tests whose storage follows --backend on
# PostgreSQL (tests/conftest.py picks them): that pass waits on the server's fsyncs, the
# SQLite pass fills the cores meanwhile (docs/development.md has the figures). The lint (ruff,
# then mypy: half a minute of a core on a fresh clone) runs beside them too, in the gaps the
# passes leave, and fails the target like a failing test. The PostgreSQL pass and the lint
# print when all end; each pass prints its slowest tests (where the time goes).
test: $(STAMP) services client-ts
	@pg_log=$$(mktemp); lint_log=$$(mktemp); \
	{ $(BIN)/ruff check . && $(BIN)/mypy; } >"$$lint_log" 2>&1 & lint_pid=$$!; \
	$(BIN)/pytest -q $(XDIST) --durations=10 --backend postgresql $(PG_SUITES) >"$$pg_log" 2>&1 & pg_pid=$$!; \
	$(BIN)/pytest $(XDIST) --durations=15; sqlite=$$?; \
	wait $$pg_pid; postgresql=$$?; wait $$lint_pid; lint=$$?; \
	echo "=== the PostgreSQL pass (pytest --backend postgresql)"; cat "$$pg_log"; \
	echo "=== the lint (ruff, mypy)"; cat "$$lint_log"; rm -f "$$pg_log" "$$lint_log"; \
	test $$sqlite -eq 0 && test $$postgresql -eq 0 && test $$lint -eq 0

# The edit loop: everything but the tests marked slow (servers, many simulated users, long
# statistical runs). `make test` runs them all, as CI does.
quick: $(STAMP)
	$(BIN)/pytest -m "not slow" -x -q $(XDIST)

$(BENCH_STAMP): $(STAMP)
	$(UV_PIP) -e '.[collector,dev,dask,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP) services
	$(BIN)/python benchmarks/run.py
	$(BIN)/python benchmarks/peers.py
	$(BIN)/python benchmarks/scale.py
	$(BIN)/python benchmarks/ingest.py
	$(BIN)/python benchmarks/storage_engines.py
	$(BIN)/python benchmarks/postgres_groups.py
	$(BIN)/python benchmarks/export.py
	$(BIN)/python benchmarks/dask_aggregation.py
	$(BIN)/python benchmarks/distributions.py
	$(BIN)/python benchmarks/records.py
	$(BIN)/python benchmarks/heavy_hitters.py
	$(BIN)/python benchmarks/longitudinal.py
	$(BIN)/python benchmarks/demo.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .demo
