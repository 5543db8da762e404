# One venv for everything. The CPU build of torch is installed first so that resolving
# `torch>=2.3` never pulls a CUDA build; override with `make TORCH=torch==X.Y.Z ...`.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
OUT ?= out/demo

.PHONY: setup demo test test-fast lint bench clean chromium mutation

$(BIN)/vgcsim: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[train,dev]"
	touch $(BIN)/vgcsim

setup: $(BIN)/vgcsim

demo: setup
	$(BIN)/vgcsim demo -o $(OUT) --overwrite

# The report's browser test needs Debian's headless Chromium: install it where missing
# (as root, through apt); without it the browser test skips locally and fails under CI=true.
chromium:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || echo "note: chromium not installed; the browser test will skip (or fail under CI=true)"; }

# The suite runs on TEST_WORKERS processes (pytest-xdist; the machine's cores, at most 4),
# except the tests that time shaped links (marker `netns`, all in tests/distributed): they
# run after, alone, since another test's load on the cores would move the rates they
# measure. Each test module runs on one worker (--dist loadscope), so a module's fixtures
# (recordings, gloo runs) are made once, not once per worker. Bytecode is cached even where
# the environment says not to (PYTHONDONTWRITEBYTECODE): each worker and each process a test
# starts would compile the same modules again.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ "$$n" -gt 4 ] && n=4; echo $$n)
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q
PARALLEL := -n $(TEST_WORKERS) --dist loadscope

# The tests' temporary folders live in RAM (/dev/shm) where the machine has it: every file the
# commands write is fsynced (vgcsim.core.outdir.atomic_write), which a disk makes cost tens of
# milliseconds a file and a tmpfs nothing; the folder goes when the run ends, pass or fail.
test: setup chromium
	@tmp=$$(mktemp -d /dev/shm/vgcsim-tests.XXXXXX 2>/dev/null || mktemp -d); \
	trap 'rm -rf "$$tmp"' EXIT; \
	echo "$(PYTEST) $(PARALLEL) -m 'not netns' --basetemp $$tmp/main"; \
	$(PYTEST) $(PARALLEL) -m "not netns" --basetemp "$$tmp/main" && \
	echo "$(PYTEST) -m netns tests/distributed --basetemp $$tmp/netns" && \
	$(PYTEST) -m netns tests/distributed --basetemp "$$tmp/netns"

test-fast: setup
	$(PYTEST) $(PARALLEL) -m "not slow"

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: setup
	$(BIN)/python benchmarks/compression.py
	$(BIN)/python benchmarks/models.py
	$(BIN)/python benchmarks/simulator.py

# Mutation testing, not part of `make test` (long on 2 cores): the score per area of
# tools/mutation.toml; `make mutation AREA=validate` (or several: AREA="validate inputs").
mutation: setup
	$(BIN)/python tools/mutation.py $(AREA)

clean:
	rm -rf $(VENV) out
