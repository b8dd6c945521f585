# Front end: `make run` reproduces the figures, `make test` runs the suite, `make lab` opens
# the notebooks. Each creates .venv on first use; the install is skipped while pyproject.toml
# and the set-up script are unchanged.
PYTHON ?= python3
# Optional extras installed with dev; `peers` brings the public simulators for parity tests.
EXTRAS ?= peers
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(EXTRAS)

.PHONY: run quick test lab html shell lint clean-venv

$(STAMP): pyproject.toml scripts/setup_env.sh
	PYTHON=$(PYTHON) EXTRAS=$(EXTRAS) scripts/setup_env.sh
	touch $@

run: $(STAMP)
	$(BIN)/tiered-kv reproduce

quick: $(STAMP)
	$(BIN)/tiered-kv reproduce --quick

test: $(STAMP)
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
