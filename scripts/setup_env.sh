#!/usr/bin/env bash
# Create .venv and install tiered-kv with its dev extra.
#
# torch: a machine that already has torch (for example a CUDA build) keeps it: the venv then
# sees the system site-packages. Otherwise torch==2.13.0 is installed first (on the project's
# CPU machines pip takes a CPU build from local disk instead of downloading a multi-GB CUDA
# build); override with TORCH_SPEC=... .
set -euo pipefail
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

if [ ! -x "$VENV/bin/python" ]; then
  if "$PY" -c "import torch" 2>/dev/null; then
    echo "setup: using the torch already installed for $PY ($("$PY" -c 'import torch; print(torch.__version__)'))"
    "$PY" -m venv --system-site-packages "$VENV"
  else
    "$PY" -m venv "$VENV"
  fi
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  "$VENV/bin/python" -m pip install --quiet "$TORCH_SPEC"
fi
"$VENV/bin/python" -m pip install --quiet -e ".[dev${EXTRAS:+,$EXTRAS}]"
# The public simulators tiered-kv is cross-checked against (tests/test_parity.py, bench peers).
case ",${EXTRAS:-}," in
  *,peers,*) scripts/fetch_peers.sh "$VENV" ;;
esac
# One run of curves and simulate fills numba's on-disk cache (cache=True kernels), so the first
# command a user types loads machine code instead of compiling it. Never fails the setup.
"$VENV/bin/tiered-kv" curves --trace conversation --json >/dev/null \
  && "$VENV/bin/tiered-kv" simulate --trace conversation --policy lru --capacity 10000000 --json >/dev/null \
  || echo "setup: simulator kernels not compiled yet; the first curves or simulate run compiles them"
