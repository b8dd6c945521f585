"""Run a benchmark and print its figures (``--json`` for machine-readable output).

Benchmarks measure a baseline in the same run and report ratios against it. They are not
tests: speed targets are checked by reading their output, recorded in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shlex

import tiered_kv.bench
from tiered_kv.cli_args import discover

NAME = "bench"
HELP = "run a benchmark (kernels, store, sim, ttft, ...) and print its figures"


#: Benchmarks that sit beside what they time instead of in :mod:`tiered_kv.bench` (why: its docstring).
BESIDE = ("tiered_kv.viz.retention_timing",)


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", metavar="BENCHMARK", required=True)
    beside = [importlib.import_module(name) for name in BESIDE]
    for module in sorted([*discover(tiered_kv.bench), *beside], key=lambda m: m.NAME):
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
        module.register(p)
        p.set_defaults(_bench=module.run)


def print_table(result: dict, prefix: str = "") -> None:
    """Flatten nested dicts into ``key.sub = value`` lines."""
    for key, value in result.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            print_table(value, prefix=name + ".")
        elif isinstance(value, float):
            print(f"{name:<56} {value:.6g}")
        else:
            print(f"{name:<56} {value}")


def run(args: argparse.Namespace) -> int:
    result = args._bench(args)
    if args.json:
        # the command that ran, flags and all: `bench record` puts it on the page (a --command wins)
        result = {**result, "recorded": {"command": "tiered-kv " + shlex.join(args._argv)}}
        print(json.dumps(result, indent=2, default=str))
    else:
        print_table(result)
    return 0
