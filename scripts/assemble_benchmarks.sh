#!/usr/bin/env bash
# BENCHMARKS.md = the summary + every benchmarks/results/*.md (each written by a record script
# from its benchmark's JSON). Re-run after updating a results file: it first re-renders
# benchmarks/SUMMARY.md from the JSONs (scripts/summary_record.py).
set -euo pipefail
cd "$(dirname "$0")/.."
"${PYTHON:-.venv/bin/python}" scripts/summary_record.py
{
  cat benchmarks/SUMMARY.md
  for f in benchmarks/results/*.md; do
    echo
    echo "---"
    echo
    # demote headings one level so each results file is a section of this page
    sed -e 's/^#/##/' "$f"
  done
} > BENCHMARKS.md
echo "wrote BENCHMARKS.md"
