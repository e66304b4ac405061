# make demo: install into .venv and schedule the bundled example cluster.
# make test: install into .venv and run ruff, mypy --strict and the whole test suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench bench-full clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/numasched simulate

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The repo root is the numasched package; mypy finds it by that name through a link.
typecheck: $(STAMP)
	mkdir -p $(VENV)/typecheck && ln -sfn $(CURDIR) $(VENV)/typecheck/numasched
	cd $(VENV)/typecheck && $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml numasched

unit: $(STAMP)
	$(BIN)/python -m pytest

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python hack/bench.py --quick

bench-full: $(STAMP)
	$(BIN)/python hack/bench.py --full

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .pytest_cache .ruff_cache
