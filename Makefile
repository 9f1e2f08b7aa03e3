# One command each on a fresh clone: `make test`, `make doc`.
PYTHON ?= python3
# another interpreter: make test PYTHON=python3.12 VENV=.venv-3.12
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test lint doc bench bench-smoke gallery-report fuzz realworld mutate clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev,doc]"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(PY) -m ruff check onnx_light tests examples benchmarks lint _doc/conf.py _doc/check_links.py _doc/conclusions.py _doc/gallery_order.py
	$(PY) -m ruff format --check onnx_light tests examples benchmarks _doc/conf.py _doc/check_links.py _doc/conclusions.py _doc/gallery_order.py
	$(PY) -m vulture onnx_light benchmarks examples lint/vulture_allowlist.py --min-confidence 60

doc: $(STAMP)
	$(PY) -m sphinx -W -n --keep-going -b html -d _doc/_build/doctrees _doc _doc/_build/html
	$(PY) _doc/check_links.py _doc/_build/html

# make bench and make bench-smoke write nothing under /sys, /proc/sys or /run. The cgroup
# rows are opt-in: BENCH_ARGS="--only cgroup --cgroup" (or benchmarks/run.py --cgroup)
# creates a memory cgroup of its own under /sys/fs/cgroup, root needed, removed after each
# measurement.
bench: $(STAMP)
	$(PY) benchmarks/run.py $(BENCH_ARGS)

bench-smoke: $(STAMP)
	$(PY) benchmarks/run.py --smoke

# the gallery report (benchmarks/results/gallery.{json,md}): every benchmark script of the
# gallery at full size, each in a fresh process, 7 rounds; the words every build's pages
# state. Run it on a quiet machine and commit the results; GALLERY_ARGS="--only plot_x"
# measures one script again.
gallery-report: $(STAMP)
	$(PY) benchmarks/gallery_report.py $(GALLERY_ARGS)

fuzz: $(STAMP)
	$(PY) -m pytest -q -m slow tests

# every verb on real exports (optimum's GPT-2 with and without past, T5, BERT, a
# Llama-like decoder; onnxruntime-genai builder folders at fp32 and int4), built from
# configs with random weights, nothing downloaded, each output checked with onnx,
# onnxruntime, optimum's generate and onnxruntime-genai; writes
# benchmarks/proofs/results/realworld.md (and .csv). Not part of CI. In a venv of its
# own (RW_VENV: torch, transformers, optimum stay out of .venv), with torch's CPU wheel
# (about 200 MB) from the index pip is set up with, else from PyTorch's CPU index
# (TORCH_INDEX). About 15 minutes on 2 cores the first time (installs and exports; the
# models are cached in /var/tmp/onnx-light-realworld, REALWORLD_CACHE elsewhere);
# REALWORLD_LARGE=1: the Llama at 3.5 GiB of weights instead (about 12 GiB of RAM, 20 GiB
# of disk; its report is realworld_large.md); REALWORLD_ARGS="--only llama-large" runs one
# model, --keep keeps the outputs (each step's are deleted once checked).
RW_VENV ?= .venv-realworld
RW_STARTED := $(shell date +%s)
RW_PY := $(RW_VENV)/bin/python
TORCH_CPU ?= torch==2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
realworld:
	test -x $(RW_PY) || $(PYTHON) -m venv $(RW_VENV)
	$(RW_PY) -m pip install --quiet --upgrade pip
	$(RW_PY) -m pip install --quiet "$(TORCH_CPU)" || \
		$(RW_PY) -m pip install --quiet "$(TORCH_CPU)" --extra-index-url $(TORCH_INDEX)
	$(RW_PY) -m pip install --quiet -e ".[dev,realworld]"
	$(RW_PY) -m pytest -q -p no:cacheprovider -m realworld tests/test_real_models.py
	$(RW_PY) -m benchmarks.realworld.run --started $(RW_STARTED) $(REALWORLD_ARGS)

# mutation testing (mutmut, configured in pyproject.toml [tool.mutmut]): the planner,
# the layout, the reference checks, the readers and commit rules; each mutant runs the
# tests that call the function it changes. Starts afresh in ./mutants, then prints the
# score (lint/mutation_score.py: killed / (total - the equivalent mutants listed in
# lint/equivalent_mutants.toml)) and fails under 95%. About 20 minutes on 2 cores: too
# long for CI, run it before resolving an issue that touches those modules. The FAT and
# exFAT tests need root and the packages .ci/run installs (skipped without them, and the
# mutants only they kill survive).
MUTATE_JOBS ?= 2
mutate: $(STAMP)
	$(PY) -m pip install --quiet -e ".[dev,mutate]"
	rm -rf mutants
	$(VENV)/bin/mutmut run --max-children $(MUTATE_JOBS)
	$(PY) lint/mutation_score.py --min 95

clean:
	rm -rf _doc/_build _doc/auto_examples _doc/gen_modules _doc/sg_execution_times.rst build dist *.egg-info .pytest_cache .ruff_cache mutants
