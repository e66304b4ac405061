# make demo: install into .venv, schedule the bundled example cluster and say how to open its console.
# make test: install into .venv and run ruff, ruff format --check, mypy --strict and the whole test suite
#            (installing Debian's chromium first, for the console's browser tests, when run as root).
# make lock: regenerate requirements.lock (the image's dependencies, pinned with hashes) from pyproject.toml.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit chromium bench bench-full lock clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

DEMO_CONSOLE ?= 127.0.0.1:8080

demo: $(STAMP)
	$(BIN)/numasched simulate
	@echo
	@echo "See the placements in the NUMA console (per-NUMA occupancy, the NVLink graph of dgx1-0, why each"
	@echo "pending pod waits):"
	@echo "  $(BIN)/numasched simulate --serve $(DEMO_CONSOLE)    then open http://$(DEMO_CONSOLE)/ui/"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The repo root is the numasched package; mypy finds it by that name through a link.
typecheck: $(STAMP)
	mkdir -p $(VENV)/typecheck && ln -sfn $(CURDIR) $(VENV)/typecheck/numasched
	cd $(VENV)/typecheck && $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml numasched

unit: $(STAMP) chromium
	$(BIN)/python -m pytest

# The console's browser tests drive Debian's chromium headless. Installed when missing and this
# runs as root with apt-get (CI: Debian with Python 3.11); otherwise those tests skip, saying why.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium for the console's browser tests (apt-get)"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || \
	      { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends chromium >/dev/null; } || \
	      echo "chromium could not be installed: the browser tests will be skipped"; \
	  else \
	    echo "chromium is missing and cannot be installed here (needs root and apt-get): the browser tests will be skipped"; \
	  fi; }

test: lint typecheck unit

# Resolved against pypi.org alone, whatever pip configuration this machine has (a local index,
# find-links or constraints would make the lock depend on the machine), for the Python running
# here (the image's 3.11 on Linux); build requirements (setuptools, wheel) are locked too, so the
# image installs everything with --require-hashes.
LOCK_ENV := env -u PIP_FIND_LINKS -u PIP_CONSTRAINT -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL -u PIP_NO_INDEX \
	PIP_CONFIG_FILE=/dev/null CUSTOM_COMPILE_COMMAND="make lock"
lock: $(STAMP)
	$(LOCK_ENV) $(BIN)/pip-compile --quiet --generate-hashes --all-build-deps --strip-extras --allow-unsafe \
		--no-emit-index-url --index-url https://pypi.org/simple --output-file requirements.lock pyproject.toml

bench: $(STAMP)
	$(BIN)/python hack/bench.py --quick

bench-full: $(STAMP)
	$(BIN)/python hack/bench.py --full

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .pytest_cache .ruff_cache
