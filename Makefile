# Two commands for a fresh machine: `make demo` trains the default task on CPU,
# `make test` runs the test suite. Both create .venv and install what they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: demo test lint bench-deps clean-venv

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# The PyTorch reference of benchmarks/ (CPU wheel); tests/test_benchmarks.py proves it equal
# to attnlab when it is installed. .ci/run installs it.
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	touch $(BENCH_STAMP)

bench-deps: $(BENCH_STAMP)

demo: $(STAMP)
	$(PY) -m attnlab.main --config=configs/reverse.py --workdir=runs/demo

# Test processes (pytest-xdist): the suite is mostly single-threaded XLA compiles, so two
# workers on CI's 2 cores take it from ~18 to ~12 minutes. More cores: make test TEST_WORKERS=8.
TEST_WORKERS ?= 2

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q -x -n $(TEST_WORKERS) --durations=15

lint: $(STAMP)
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

clean-venv:
	rm -rf $(VENV)
