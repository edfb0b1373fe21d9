# Every target installs what it needs into .venv on first use (pinned by requirements.lock).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint format bench clean

$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	PYTHONWARNINGS=ignore $(BIN)/pip install --quiet -c requirements.lock -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m pipeline.demo jobs/demo.toml

# The report's browser test drives Debian's headless Chromium (no browser download).
test: $(STAMP)
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium chromium-driver)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache var
