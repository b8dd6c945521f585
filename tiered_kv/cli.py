"""The ``tiered-kv`` command.

Subcommands are discovered from :mod:`tiered_kv.commands` (and benchmarks from
:mod:`tiered_kv.bench`), so each feature owns its command in its own module. Every
subcommand has ``--help``; heavy libraries are imported only when a command runs.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence
from types import ModuleType

import tiered_kv
import tiered_kv.commands


def discover(package: ModuleType) -> list[ModuleType]:
    """Modules of ``package`` that define ``NAME``, ``register`` and ``run``, sorted by name."""
    found = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        if all(hasattr(module, attr) for attr in ("NAME", "register", "run")):
            found.append(module)
    return sorted(found, key=lambda m: m.NAME)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tiered-kv",
        description="Research workbench for tiered LLM KV-cache storage "
        "(GPU -> host window tier -> SSD global KV).",
    )
    parser.add_argument("--version", action="version", version=f"tiered-kv {tiered_kv.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in discover(tiered_kv.commands):
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.register(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 0
    try:
        return int(args._run(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        # Bad input is reported as one clear line, not a traceback.
        print(f"tiered-kv {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
