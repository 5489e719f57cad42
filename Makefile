# bnsym: build the book, run the tests, open JupyterLab.
# Everything runs inside a project-local virtual environment (.venv) built from
# pyproject.toml with the exact pins of constraints.txt.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON_BOOT := $(shell command -v python3.11 2>/dev/null || command -v python3 2>/dev/null)
VENV        := .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed
NBTEST      := _nbtest
TEST_BUILD  := _build/test/_build
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.json
LAB_ARGS    ?=
ROOT_FLAG   := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: help venv test lint unit-test nbtest test-book browser-test test-portability book bench lab clean distclean

help:
	@echo "make book       build the Jupyter Book into _build/html   (BNSYM_SCALE=book)"
	@echo "make test       lint, unit tests, every notebook under nbval, the book and its browser test (BNSYM_SCALE=test)"
	@echo "make test-portability  unit tests and notebooks as they are, with OpenBLAS's Haswell kernels, and with NumPy's"
	@echo "                       baseline SIMD only: each must pass (summary in _build/portability/summary.txt)"
	@echo "make bench      every benchmark in benchmarks/ -> benchmarks/results/*.json (BENCH_ARGS=--device cuda ...)"
	@echo "make lab        JupyterLab; notebooks/*.md open as notebooks (LAB_ARGS=... for extra options)"
	@echo "make venv       create .venv and install the pinned dependencies"
	@echo "make clean      remove build and test outputs (distclean: also .venv)"

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -n "$(PYTHON_BOOT)" || { echo "error: neither python3.11 nor python3 found" >&2; exit 1; }
	test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install -c constraints.txt -e ".[book,dev]"
	touch $@

# make test executes every chapter once. nbval runs each converted notebook (two pytest-xdist workers, a
# notebook per worker, one torch thread each) and its plugin book/_ext/nbval_cache.py stores every notebook
# that passed in the test build's jupyter cache; the test-scale book build then finds each chapter there
# (myst-nb matches a notebook by its code cells) instead of executing it again, and the browser test opens
# that build. `make book` runs the same step at book scale first. Measured on a fresh clone on this 2-core
# machine, 13 chapters (2026-11-23): unit tests 166 s, nbval 299 s (230 cells), the test-scale book and the
# browser test (25 pages and search) about 2 min together; `.ci/run` 12 min 11 s with Chromium installed.
test: lint unit-test nbtest test-book browser-test

lint: $(STAMP)
	$(VENV)/bin/ruff check bnsym tests benchmarks

XDIST := -n 2
# One BLAS/OpenMP/torch thread per process wherever chapters and tests run (the book's extension sets the same
# for its kernels). The second thread mostly spin-waits on a shared 2-core machine: a bn_kernel by QMC (tanh,
# B = 32) took 5.6 CPU-s with the default threads and 0.55 with one; chapter 7's Table 1 networks 49 and 4.
ONE_THREAD := OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

unit-test: $(STAMP)
	BNSYM_SCALE=test $(ONE_THREAD) $(PY) -m pytest $(XDIST) --ignore tests/test_book_browser.py tests

# nbval collects only .ipynb: convert each MyST notebook into a throw-away folder that
# sits next to notebooks/, so relative paths like ../something resolve the same way.
NBTEST_BUILD ?= $(TEST_BUILD)
nbtest: $(STAMP)
	$(call execute_notebooks,$(NBTEST_BUILD),test,)

# CI machines differ in CPU and BLAS kernel, so a test may assert only what the mathematics guarantees. This runs the
# unit tests and every notebook three times: as they are; with OpenBLAS forced to another kernel; and with NumPy's
# dispatch restricted to its baseline (NPY_DISABLE_CPU_FEATURES = the SIMD features this CPU was found to have).
# Not part of `make test` (three full runs); each configuration's notebooks get their own cache folder.
PORTABILITY := _build/portability
test-portability: $(STAMP)
	features="$$($(PY) -c 'from numpy._core import _multiarray_umath as m; \
	  print(" ".join(f for f in m.__cpu_dispatch__ if m.__cpu_features__.get(f)))')"; \
	mkdir -p $(PORTABILITY); : > $(PORTABILITY)/summary.txt; failed=0; \
	for name in as-is openblas-haswell numpy-baseline; do \
	  case $$name in \
	    openblas-haswell) export OPENBLAS_CORETYPE=Haswell ;; \
	    numpy-baseline) unset OPENBLAS_CORETYPE; export NPY_DISABLE_CPU_FEATURES="$$features" ;; \
	  esac; \
	  echo "== $$name (OPENBLAS_CORETYPE=$${OPENBLAS_CORETYPE:-} NPY_DISABLE_CPU_FEATURES=$${NPY_DISABLE_CPU_FEATURES:-})"; \
	  $(MAKE) --no-print-directory unit-test 2>&1 | tee $(PORTABILITY)/$$name-unit.log || failed=1; \
	  $(MAKE) --no-print-directory nbtest NBTEST_BUILD=$(PORTABILITY)/$$name 2>&1 | tee $(PORTABILITY)/$$name-nb.log \
	    || failed=1; \
	  for part in unit nb; do \
	    echo "$$name $$part: $$(grep -E '^=+ .*(passed|failed).* =+$$' $(PORTABILITY)/$$name-$$part.log | tail -1)" \
	      >> $(PORTABILITY)/summary.txt; \
	  done; \
	done; \
	cat $(PORTABILITY)/summary.txt; exit $$failed

test-book: $(STAMP)
	$(call build_book,$(TEST_BUILD),test,--path-output _build/test)

browser-test: $(STAMP)
	BNSYM_BOOK_HTML=$(TEST_BUILD)/html $(PY) -m pytest tests/test_book_browser.py

# jupyter-cache keys a notebook on its own cells only. A change of BNSYM_SCALE, of the bnsym
# sources or of the pinned dependencies would otherwise leave stale cached results, so such a
# change drops the execution cache and the check records inside it (and only then: an unchanged
# rebuild stays fast). $(1): the build folder, $(2): the scale.
define drop_stale_cache
key="$(2) $$(cat pyproject.toml constraints.txt $$(find bnsym -name '*.py' | LC_ALL=C sort) | sha1sum | cut -c1-16)"; \
if [ "$$(cat $(1)/.bnsym_cache_key 2>/dev/null)" != "$$key" ]; then \
  rm -rf $(1)/.jupyter_cache $(1)/jupyter_execute $(1)/.doctrees $(1)/sweeps; \
fi; \
mkdir -p $(1); echo "$$key" > $(1)/.bnsym_cache_key
endef

# Execute every chapter under nbval, two at a time, into the jupyter cache of the build folder $(1) at scale
# $(2); $(3): extra pytest options. The book build then renders the chapters from that cache.
define execute_notebooks
$(call drop_stale_cache,$(1),$(2)); \
rm -rf $(NBTEST); mkdir -p $(NBTEST); \
$(VENV)/bin/jupytext --to ../$(NBTEST)//ipynb notebooks/*.md; \
BNSYM_SCALE=$(2) BNSYM_PROGRESS=0 BNSYM_CHECKS_DIR=$(CURDIR)/$(1)/.jupyter_cache/checks $(ONE_THREAD) \
  PYTHONPATH=book/_ext$${PYTHONPATH:+:$$PYTHONPATH} \
  $(PY) -m pytest $(XDIST) --dist loadfile -p nbval_cache --nbval-cache=$(CURDIR)/$(1)/.jupyter_cache \
  --nbval-lax --nbval-current-env $(3) $(NBTEST)
endef

# $(1): the build folder, $(2): the scale, $(3): extra jupyter-book options.
define build_book
$(call drop_stale_cache,$(1),$(2)); \
echo "BNSYM_SCALE=$(2)"; \
BNSYM_SCALE="$(2)" $(VENV)/bin/jupyter-book build . --toc _toc.yml --config book/_config.yml -W -n --keep-going $(3)
endef

# The book at BNSYM_SCALE (default book) in _build/html; the test-scale book of `make test` lives apart, in
# _build/test/_build/html, so neither build drops the other's execution cache.
book: $(STAMP)
	$(call execute_notebooks,_build,$${BNSYM_SCALE:-book},--nbval-cache-missing-only) || test $$? = 5  # 5: all cached
	$(call build_book,_build,$${BNSYM_SCALE:-book},)

# One script per comparison in benchmarks/; harness.py runs them all and each writes its JSON record to
# benchmarks/results/, which the book's benchmarks page shows. Timings, not tests: nothing fails on a slow machine.
bench: $(STAMP)
	$(PY) benchmarks/harness.py $(BENCH_ARGS)

# The override makes a double click open .md files as Jupytext notebooks. It lives in the
# venv's share/jupyter/lab/settings, so no user-level setting is touched; saving in Lab
# writes back to the .md only (jupytext.toml sets no pairing).
lab: $(STAMP)
	mkdir -p $(dir $(LAB_SETTINGS))
	printf '%s\n' '{' \
	  '  "@jupyterlab/docmanager-extension:plugin": {' \
	  '    "defaultViewers": {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}' \
	  '  }' '}' > $(LAB_SETTINGS)
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) $(LAB_ARGS)

clean:
	rm -rf _build $(NBTEST) .pytest_cache
	find . -path ./$(VENV) -prune -o \( -name __pycache__ -o -name .ipynb_checkpoints \) -type d -print0 | xargs -0 rm -rf
	rm -rf *.egg-info

distclean: clean
	rm -rf $(VENV)
