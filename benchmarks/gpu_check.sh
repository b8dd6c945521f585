#!/usr/bin/env bash
# GPU check for the Triton kernels (issue 2): on a CUDA machine (made for one H200), run the
# kernel tests with the real Triton kernels (no TRITON_INTERPRET) and `bench kernels`, and
# write everything to ONE file. Budget: under 8 minutes (tests <= 5 min, bench <= 3 min).
#
#   benchmarks/gpu_check.sh            # -> $OUT/gpu_check.txt if $OUT is set,
#                                      #    else benchmarks/out/gpu_check.txt
#   benchmarks/gpu_check.sh FILE       # -> FILE
#
# Python: $PYTHON, else .venv/bin/python, else python3; it needs torch with CUDA, triton,
# pytest and hypothesis (numpy, tqdm). When tiered_kv is not installed, a throw-away symlink
# tree maps kernels/ to tiered_kv.kernels (what the pyproject package-dir mapping does).
set -u
cd "$(dirname "$0")/.." || exit 2
ROOT=$(pwd)
if [ $# -ge 1 ]; then RESULT=$1; else RESULT=${OUT:-$ROOT/benchmarks/out}/gpu_check.txt; fi
mkdir -p "$(dirname "$RESULT")"
unset TRITON_INTERPRET
export PYTHONUNBUFFERED=1

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ] && .venv/bin/python -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    PY=.venv/bin/python
  else
    PY=python3
  fi
fi

main() {
  echo "# tiered-kv gpu_check  $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.memory --format=csv
  if ! "$PY" -c "import torch, triton, pytest, hypothesis, numpy, tqdm; assert torch.cuda.is_available(), 'no CUDA device'"; then
    echo "FAILED: $PY lacks torch with CUDA, triton, pytest, hypothesis, numpy or tqdm"
    return 2
  fi
  "$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
  if ! "$PY" -c "import tiered_kv.kernels.fp4" 2>/dev/null; then
    SHIM=$(mktemp -d)
    mkdir -p "$SHIM/tiered_kv"
    for f in "$ROOT"/tiered_kv/*; do ln -s "$f" "$SHIM/tiered_kv/"; done
    ln -s "$ROOT/kernels" "$SHIM/tiered_kv/kernels"
    export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}"
    echo "tiered_kv not installed: using the symlink tree $SHIM"
  fi

  echo; echo "## kernel tests on CUDA (Triton compiled, TRITON_INTERPRET unset)"
  timeout 300 "$PY" -m pytest -q -p no:cacheprovider tests/test_kernels_fp4.py tests/test_kernels_swa.py
  local rc_tests=$?
  echo "tests rc=$rc_tests"

  echo; echo "## bench kernels (bf16 input, 1 GiB for FP4; attention Tq=8192, W=512, 32/8 heads, D=128)"
  timeout 180 "$PY" - <<'PYEOF'
import argparse, json
from tiered_kv.bench import kernels as k
p = argparse.ArgumentParser()
k.register(p)
args = p.parse_args(["--device", "cuda", "--size", "1GiB", "--dtype", "bfloat16"])
args.json = True
print(json.dumps(k.run(args), indent=2, default=str))
PYEOF
  local rc_bench=$?
  echo "bench rc=$rc_bench"
  echo; echo "# done $(date -u +%Y-%m-%dT%H:%M:%SZ)  tests rc=$rc_tests  bench rc=$rc_bench"
  [ "$rc_tests" -eq 0 ] && [ "$rc_bench" -eq 0 ]
}

main 2>&1 | tee "$RESULT"
rc=${PIPESTATUS[0]}
echo "results written to $RESULT"
exit "$rc"
