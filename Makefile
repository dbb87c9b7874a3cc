# verl-health: `make demo` and `make test` do all the set-up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench mutation ui clean

# more pip install options (.ci/run: --no-compile)
PIP_FLAGS ?=

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(PIP_FLAGS) -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/verl-health demo

# two workers, each test file on one of them (module fixtures stay whole): 6.1 -> 4.0 min on 2 cores
test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile --durations=15

lint: $(STAMP)
	$(VENV)/bin/ruff check pipeline lab tests benchmarks

bench: $(STAMP)
	$(PY) benchmarks/bench_ingest.py
	$(PY) benchmarks/bench_derive.py
	$(PY) benchmarks/bench_detect.py
	$(PY) benchmarks/bench_report.py
	$(PY) benchmarks/bench_pipeline.py

mutation: $(STAMP)
	benchmarks/mutation.sh

# the instance `verl-health analyze` and `demo` record their runs in (data/dagster unless DAGSTER_HOME is set)
DAGSTER_HOME ?= $(CURDIR)/data/dagster
# a launched range run plans each asset in one event, as `analyze` does (pipeline/defs/storage.py)
DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS ?= true

ui: $(STAMP)
	mkdir -p $(DAGSTER_HOME)
	DAGSTER_HOME=$(DAGSTER_HOME) DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS=$(DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS) \
		$(VENV)/bin/dagster dev -w workspace.yaml

clean:
	rm -rf data reports/runs reports/fleet .pytest_cache
