#!/usr/bin/env bash
# BENCHMARKS.md = benchmarks/SUMMARY.md + every benchmarks/results/*.md, each page re-rendered from
# its JSON by its benchmark's module. The one command behind it (see its --help):
#   tiered-kv bench record NAME FILE.json   # record a new run of benchmark NAME, then reassemble
#   tiered-kv bench record all              # re-render every page from the committed JSONs, reassemble
set -euo pipefail
cd "$(dirname "$0")/.."
"${TIERED_KV:-.venv/bin/tiered-kv}" bench record all
