#!/usr/bin/env bash
# benchmarks/results/deepseek_day.md from the JSON of `tiered-kv day replay --record`, then BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
JSON=${1:-benchmarks/results/deepseek_day.json}
.venv/bin/tiered-kv day markdown "$JSON" > benchmarks/results/deepseek_day.md
scripts/assemble_benchmarks.sh
