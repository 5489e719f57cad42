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
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.json
LAB_ARGS    ?=
ROOT_FLAG   := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: help venv test lint unit-test nbtest book bench lab clean distclean

help:
	@echo "make book       build the Jupyter Book into _build/html   (BNSYM_SCALE=book)"
	@echo "make test       lint (ruff) + unit tests + every notebook under nbval   (BNSYM_SCALE=test)"
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

test: lint unit-test nbtest

lint: $(STAMP)
	$(VENV)/bin/ruff check bnsym tests benchmarks

unit-test: $(STAMP)
	BNSYM_SCALE=test $(PY) -m pytest tests

# nbval collects only .ipynb: convert each MyST notebook into a throw-away folder that
# sits next to notebooks/, so relative paths like ../something resolve the same way.
nbtest: $(STAMP)
	rm -rf $(NBTEST)
	mkdir -p $(NBTEST)
	for nb in notebooks/*.md; do \
	  [ -e "$$nb" ] || continue; \
	  $(VENV)/bin/jupytext --to ipynb --output "$(NBTEST)/$$(basename "$${nb%.md}").ipynb" "$$nb"; \
	done
	BNSYM_SCALE=test $(PY) -m pytest --nbval-lax --nbval-current-env $(NBTEST)

# jupyter-cache keys a notebook on its own cells only. A change of BNSYM_SCALE, of the bnsym
# sources or of the pinned dependencies would otherwise leave stale cached results, so such a
# change drops the execution cache and the chapters' sweep results in _build/sweeps (and only
# then: an unchanged rebuild stays fast).
book: $(STAMP)
	scale="$${BNSYM_SCALE:-book}"; \
	key="$$scale $$(cat pyproject.toml constraints.txt $$(find bnsym -name '*.py' | LC_ALL=C sort) | sha1sum | cut -c1-16)"; \
	if [ "$$(cat _build/.bnsym_cache_key 2>/dev/null)" != "$$key" ]; then \
	  rm -rf _build/.jupyter_cache _build/jupyter_execute _build/.doctrees _build/sweeps; \
	fi; \
	mkdir -p _build; echo "$$key" > _build/.bnsym_cache_key; \
	echo "BNSYM_SCALE=$$scale"; \
	BNSYM_SCALE="$$scale" $(VENV)/bin/jupyter-book build . --toc _toc.yml --config book/_config.yml -W -n --keep-going

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
