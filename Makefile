# Every target installs what it needs into .venv on first use (pinned by requirements.lock).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-dagster test-stress system-tools lint format bench clean docs docs-build

$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	PYTHONWARNINGS=ignore $(BIN)/pip install --quiet -c requirements.lock -e '.[dev]'
	touch $(STAMP)

# The dagster extra's own virtualenv: dagster 1.13 needs watchdog<7, requirements.lock pins 7
# (mkdocs'), so the adapter (pipeline/orchestrate/dagster.py) and its tests (tests/with_dagster)
# run from requirements-dagster.lock, beside the main .venv and without changing it.
DAGSTER_VENV := .venv-dagster
DAGSTER_STAMP := $(DAGSTER_VENV)/.installed

$(DAGSTER_STAMP): pyproject.toml requirements-dagster.lock
	$(PYTHON) -m venv $(DAGSTER_VENV)
	$(DAGSTER_VENV)/bin/pip install --quiet --upgrade pip
	PYTHONWARNINGS=ignore $(DAGSTER_VENV)/bin/pip install --quiet -c requirements-dagster.lock \
		-e '.[dev,dagster]'
	touch $(DAGSTER_STAMP)

demo: $(STAMP)
	$(BIN)/python -m pipeline.demo jobs/demo.toml

# Debian's packages the suite drives: headless Chromium for the report's browser test (no
# browser download), tmux for the progress bar's terminal test.
SYSTEM_TOOLS := chromium chromedriver tmux
APT_PACKAGES := chromium chromium-driver tmux
# promtool checks and unit-tests deploy/prometheus/ground-rules.yml and the dashboard's queries.
# Taken from Debian's prometheus package into .venv/bin: installing the package would also
# install, enable and start a Prometheus server.
PROMTOOL := $(BIN)/promtool
system-tools: $(STAMP)
	@for tool in $(SYSTEM_TOOLS); do command -v $$tool >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then \
		apt-get update -qq && apt-get install -y -qq $(APT_PACKAGES) >/dev/null; fi
	@if ! command -v promtool >/dev/null && [ ! -x $(PROMTOOL) ]; then \
		tmp=$$(mktemp -d) && ( cd $$tmp && \
		{ apt-get download prometheus || { apt-get update -qq && apt-get download prometheus; }; } \
			>/dev/null 2>&1 && \
		dpkg-deb --fsys-tarfile prometheus_*.deb | tar -xO ./usr/bin/promtool >promtool && \
		install -m 755 promtool $(CURDIR)/$(PROMTOOL) ); \
		status=$$?; rm -rf $$tmp; exit $$status; fi

# Three workers (pytest-xdist) on 2 cores: most of the suite waits on quota windows, emulator
# latency and child processes rather than on the CPU (two workers kept the cores 64 % busy), so a
# third shortens it: 412 s -> 324 s on an idle 2-core machine, side by side at d33408f.
# Every test has its own directory, database, emulator and ports. `PYTEST_WORKERS=0` runs it in
# one process.
PYTEST_WORKERS ?= 3
PYTEST := $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal

test: $(STAMP) system-tools docs-build
	$(PYTEST)
	$(MAKE) test-dagster

# The Dagster assets against the emulator, in .venv-dagster (about 20 s).
test-dagster: $(DAGSTER_STAMP)
	$(DAGSTER_VENV)/bin/python -m pytest -q tests/with_dagster

# The docs site (mkdocs.yml): `make docs` serves it on http://127.0.0.1:8000 as you edit;
# `make docs-build` builds it into var/site, strict: a broken link or anchor fails, and the
# reference pages are generated from the code as it builds (mkdocs_hooks.py), which fails too
# on a job key with no comment above it or a command or flag with no help. `make test`
# builds it first. Never --quiet: strict mode counts only the warnings it logs, so a quiet
# build passes with broken links.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

docs-build: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The suite STRESS_RUNS times in a row beside `stress-ng --cpu 8` (a machine at a load of ~10),
# stopping at the first failure: a test that depends on timing fails here, not in CI.
# STRESS_TESTS narrows it, e.g. `make test-stress STRESS_RUNS=3 STRESS_TESTS=tests/e2e/test_crash.py`.
STRESS_RUNS ?= 5
STRESS_TESTS ?=
test-stress: $(STAMP) system-tools
	@command -v stress-ng >/dev/null || (apt-get update -qq && apt-get install -y -qq stress-ng)
	@stress-ng --cpu 8 --timeout 4h --quiet & stress=$$!; \
	trap 'kill $$stress 2>/dev/null; wait $$stress 2>/dev/null' EXIT; \
	trap 'exit 130' INT TERM; \
	start=$$(date +%s); \
	for i in $$(seq 1 $(STRESS_RUNS)); do \
		echo "== run $$i of $(STRESS_RUNS) beside stress-ng --cpu 8"; \
		$(PYTEST) -x $(STRESS_TESTS) || { \
			echo "run $$i of $(STRESS_RUNS) FAILED after $$(( $$(date +%s) - start )) s"; exit 1; }; \
	done; \
	echo "$(STRESS_RUNS) runs passed under load in $$(( $$(date +%s) - start )) s"

# The type checker (basedpyright: pyright with Node shipped as a wheel) after ruff; its settings,
# level and scope (pipeline/) are in pyproject.toml's [tool.basedpyright]. The Dagster adapter
# is checked apart, against .venv-dagster where dagster is installed (pyrightconfig.dagster.json).
lint: $(STAMP) $(DAGSTER_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/basedpyright
	$(BIN)/basedpyright -p pyrightconfig.dagster.json

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# `make bench`: the side-by-side table, the shared quota at scale and verification's cost (BENCHMARKS.md, about 50
# minutes); BENCH_ARGS=--all adds every benchmark in bench/, and
# BENCH_ARGS=bench_batch.py runs one (batch mode at 100,000 questions, Developer API and Vertex,
# and a demo-shaped job with own retrieval's fallback on).
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python bench/run_all.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(DAGSTER_VENV) .pytest_cache var
