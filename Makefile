# Two commands for a fresh machine: `make demo` trains the default task on CPU,
# `make test` runs the test suite. Both create .venv and install what they need: the demo
# attnlab alone, the tests also its test extra (pytest, ruff, selenium, nbclient).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: demo test check lint bench-deps clean-venv ablations notebook

# jax 0.10, flax 0.12 and grain 0.2.18 require Python >= 3.11: an older interpreter is refused
# in one line before a virtualenv is made of it (pip would fail later, in a page of resolver
# output). Once .venv exists, its own interpreter is the one checked.
# $(call check_python,INTERPRETER,ITS NAME IN THE MESSAGE,THE WAY OUT); no commas in the args.
check_python = version=$$($(1) --version 2>&1 | sed -n 's/^Python \([0-9]*\.[0-9]*\).*/\1/p'); \
  case "$$version" in 3.1[1-9] | 3.[2-9][0-9]) ;; *) echo "error: attnlab needs Python >= 3.11; \
  $(2) is $${version:-not found}; $(3) (Ubuntu 22.04: sudo apt install python3.11 \
  python3.11-venv)" >&2; exit 2;; esac
RETRY := make $(or $(MAKECMDGOALS),demo) PYTHON=python3.11

$(STAMP): pyproject.toml
	@if [ -x $(PY) ]; then $(call check_python,$(PY),$(PY),make clean-venv; then $(RETRY)); \
	else $(call check_python,$(PYTHON),PYTHON=$(PYTHON),pass another: $(RETRY)); fi
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $(STAMP)

# pytest, pytest-xdist, pytest-timeout, ruff, selenium, nbclient + ipykernel (the notebook's
# test): added to a demo's .venv by make test.
$(TEST_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[test]'
	touch $(TEST_STAMP)

# The PyTorch reference of benchmarks/ (CPU wheel); tests/house/test_benchmarks.py proves it equal
# to attnlab when it is installed. .ci/run installs it.
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	touch $(BENCH_STAMP)

bench-deps: $(BENCH_STAMP)

demo: $(STAMP)
	$(PY) -m attnlab.main --config=configs/reverse.py --workdir=runs/demo

# Test processes (pytest-xdist): the suite is mostly single-threaded XLA compiles, so two
# workers on CI's 2 cores halve its wall time (the same 14 tests alternated, one Intel Xeon:
# 361 / 336 s serial, 184 / 170 s with 2). More cores: make test TEST_WORKERS=8.
TEST_WORKERS ?= 2

# -rs lists each skipped test with its reason: a part missing outside CI (tests/support/parts.py).
test: $(TEST_STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q -rs -x -n $(TEST_WORKERS) --durations=15

# The inner loop: every test but those marked slow (over ~3 s each: trainings, subprocesses,
# compiles; README.md says how long). The real parts (browser, Bible modules, PyTorch) stay.
check: $(TEST_STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q -rs -x -n $(TEST_WORKERS) -m 'not slow'

# Every converged ablation of results/README.md, each archived in results/<name> with its report.
# Resumable: rerun after an interruption; on a fresh checkout the archives restore finished
# trials. A failed experiment does not stop the next ones. Order: a sweep copies the trials an
# earlier one finished (attnlab/sweeps/shared.py).
# ABLATION_WORKERS sweep processes go through the list side by side, each claiming the next
# trial no other holds (attnlab/sweeps/claims.py): one that finds its experiment all claimed
# goes on to the next while the other finishes, so no core idles at an experiment's end.
# dtype comes first: the bfloat16 default on CPUs that have fast bfloat16 waits on its verdict.
# Each worker's trials run on its own share of the CPUs (attnlab.sweep --cpu_share).
# Sized for 2 CPU cores, one single-threaded trial per core; on an accelerator:
# make ablations ABLATION_WORKERS=1 SWEEP_ENV=
ABLATIONS ?= dtype headlines score_timing bottleneck heads score_timing_bible local_global
ABLATION_WORKERS ?= 2
SWEEP_ENV ?= XLA_FLAGS=--xla_cpu_multi_thread_eigen=false
SWEEP_FLAGS ?= --parallel=1

# Background jobs of a script ignore Ctrl-C, so the trap passes it on as SIGTERM, on which each
# sweep stops its trials as on Ctrl-C (a rerun resumes them).
ablations: $(STAMP)
	@for name in $(ABLATIONS); do test -f experiments/$$name.py \
	  || { echo "error: no such file: experiments/$$name.py" >&2; exit 1; }; done
	@trap 'trap "" INT TERM; kill -TERM 0; wait; exit 130' INT TERM; pids=; \
	for worker in $$(seq $(ABLATION_WORKERS)); do \
	  share=; [ $(ABLATION_WORKERS) -gt 1 ] && share=--cpu_share=$$worker/$(ABLATION_WORKERS); \
	  ( failed=0; for name in $(ABLATIONS); do \
	      $(SWEEP_ENV) $(PY) -m attnlab.sweep experiments/$$name.py $(SWEEP_FLAGS) \
	        --workdir=runs/$$name --archive=results/$$name $$share || failed=1; \
	    done; exit $$failed ) & pids="$$pids $$!"; \
	done; failed=0; for pid in $$pids; do wait $$pid || failed=1; done; exit $$failed

# The lint `make test` runs first; the code's layout is its own (2-space indents, hanging
# continuations), not ruff format's.
lint: $(TEST_STAMP)
	$(PY) -m ruff check .

clean-venv:
	rm -rf $(VENV)

# docs/tour.ipynb run again from the start, its outputs saved in place (what the test compares).
notebook: $(TEST_STAMP)
	$(PY) -c "import nbclient, nbformat; nb = nbformat.read('docs/tour.ipynb', as_version=4); \
	nbclient.NotebookClient(nb, timeout=600, record_timing=False, \
	resources={'metadata': {'path': 'docs'}}).execute(); \
	nbformat.write(nb, 'docs/tour.ipynb')"
