#!/usr/bin/env bash
# BENCHMARKS.md = the summary below + every benchmarks/results/*.md (each written by the
# engineer who ran the command it names). Re-run after updating a results file.
set -euo pipefail
cd "$(dirname "$0")/.."
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
