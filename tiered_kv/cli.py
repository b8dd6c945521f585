"""The ``tiered-kv`` command.

Subcommands are discovered from :mod:`tiered_kv.commands` (its docstring has the contract) and
benchmarks from :mod:`tiered_kv.bench`. Start-up: ``tiered-kv curves ...`` imports only
``tiered_kv.commands.curves`` (a module whose file name is its ``NAME``); the full list of
commands is imported only for ``--help``, a bare ``tiered-kv`` or a name that is not a command
module, so that argparse can list them all.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import tiered_kv
import tiered_kv.commands
from tiered_kv.cli_args import Parser, discover, flag_names, join_negative_values, name_flags


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given ``argv``, only the subcommand it names is imported and registered."""
    parser = Parser(  # errors as one line naming the flag
        prog="tiered-kv",
        description="Research workbench for tiered LLM KV-cache storage "
        "(GPU -> host window tier -> SSD global KV).",
    )
    parser.add_argument("--version", action="version", version=f"tiered-kv {tiered_kv.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = next((a for a in argv if not a.startswith("-")), None) if argv is not None else None
    for module in discover(tiered_kv.commands, only=wanted):
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.register(p)
        p.set_defaults(_run=module.run, _fast_exit=getattr(module, "FAST_EXIT", False),
                       _flags=flag_names(p, getattr(module, "PARAMETER_FLAGS", None)))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status.

    In the ``tiered-kv`` process itself (``argv`` taken from the command line), a command whose
    module sets ``FAST_EXIT = True`` (it leaves nothing to flush or close) ends the process as
    soon as it returns, output flushed, without the interpreter's teardown: numba's and LLVM's
    finalizers are a sizeable share of a warm ``tiered-kv curves``, whose work is short.
    """
    entry = argv is None and Path(sys.argv[0]).name in ("tiered-kv", "cli.py")
    code, fast_exit = _run(argv)
    if entry and fast_exit:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)
    return code


def _run(argv: Sequence[str] | None) -> tuple[int, bool]:
    """(exit status, whether the command that ran may end the process without teardown)."""
    argv = join_negative_values(sys.argv[1:] if argv is None else argv)  # --capacity -5GiB reaches its check
    parser = build_parser(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a bad flag: argparse has printed the one-line error
        if exc.code == 2:
            return 2, False
        raise
    if not getattr(args, "_run", None):
        parser.print_help()
        return 0, False
    args._argv = argv  # what was typed, for a command that records its own invocation (bench --json)
    try:
        return int(args._run(args) or 0), args._fast_exit
    except (ValueError, FileNotFoundError) as exc:
        # Bad input is reported as one clear line, not a traceback, naming the flag the user
        # typed where the library named its own parameter ("days:" -> "--days:").
        print(f"tiered-kv {args.command}: error: {name_flags(str(exc), args._flags)}", file=sys.stderr)
        return 2, args._fast_exit

if __name__ == "__main__":
    sys.exit(main())
