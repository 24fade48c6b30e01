# nmtdecode — the two commands a new machine needs: `make demo` and `make test`.
PYTHON ?= python3
# pytest rewrites every test module's asserts; without bytecode files (a shell that sets
# PYTHONDONTWRITEBYTECODE) it does so again in each process of each run, most of a quick run's time.
unexport PYTHONDONTWRITEBYTECODE
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup browser demo lint test test-fast bench gpu-check demo-model clean

setup: $(STAMP)

# torch first, pinned: this pin resolves to a CPU wheel on our machines, while an
# unpinned torch (pulled in by another package) would download a CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test]'
	# the parity tests' peers (tests/peer_opennmt.py, tests/peer_eole.py); --no-deps keeps torch as pinned above
	$(PY) -m pip install --quiet --no-deps opennmt-py==3.5.1 eole==0.6.4
	touch $(STAMP)

demo: setup
	$(VENV)/bin/nmtdecode translate -c configs/demo.yaml --src data/demo/sample.en

# ruff (lint and format) and mypy, configured in pyproject.toml; .ci/run runs this before the tests
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# An AVX2 CPU (no AVX-512, VNNI or BF16: AMD Zen 1-3, most Intel client chips) as torch, oneDNN and
# fbgemm see one, on any newer CPU: their caps, read when torch loads (nmtdecode/models/cpu.py).
EMULATE_AVX2 := ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2

# A CPU with more than AVX2 (AVX-512, AVX-VNNI) runs the precision tests again capped at AVX2; an
# AVX2 CPU has just run them as itself.
ABOVE_AVX2 := $(shell grep -Eqs 'avx512f|avx_vnni' /proc/cpuinfo || ! grep -qs avx2 /proc/cpuinfo && echo yes)

# everything, then the precision and kernel-choice tests again as an AVX2 CPU runs them
test: setup browser
	$(PY) -m pytest -n auto
	$(if $(ABOVE_AVX2),$(EMULATE_AVX2) $(PY) -m pytest -q -n auto -m "precision and not subprocess and not parity",@echo "nmtdecode: an AVX2 CPU: its precision tests ran as itself")

# tests/test_show.py renders `nmtdecode show`'s page in headless Chromium: installed with apt where
# this runs as root (as CI does), else one line says what to install (the test fails without it).
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq && \
	    apt-get install -y -qq chromium >/dev/null; } || \
	  echo "nmtdecode: the browser test needs Chromium, which this user cannot install: install the chromium package (apt-get install chromium) and rerun"

# the inner loop, on every core (pytest-xdist): make test runs these too, with the real processes
# and the peers' parity tests
test-fast: setup
	$(PY) -m pytest -n auto -m "not slow and not subprocess and not parity"

bench: setup
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/run.py

# On a GPU machine, with its own python3 and packages (no venv, nothing downloaded): the CUDA tests,
# the CLI job and the benchmark against transformers in one run (bench/gpu_check.py; --dry-run on CPU).
gpu-check:
	PYTHONPATH=. $(PYTHON) bench/gpu_check.py $(GPU_CHECK_ARGS)

# Rebuilds data/demo from Debian's FreeDict dictionaries (apt-get install dict-freedict-eng-deu dict-freedict-deu-eng).
demo-model: setup
	$(PY) scripts/train_demo.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
