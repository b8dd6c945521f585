"""Every subcommand (and every benchmark) answers --help."""

import subprocess
import sys

import pytest

import tiered_kv.bench
import tiered_kv.commands
from tiered_kv.cli import build_parser
from tiered_kv.cli_args import discover


def _help(*argv: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "tiered_kv.cli", *argv, "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_top_level_help_lists_commands():
    out = _help()
    for module in discover(tiered_kv.commands):
        assert module.NAME in out


@pytest.mark.parametrize("name", [m.NAME for m in discover(tiered_kv.commands)])
def test_each_command_has_help(name):
    assert "usage:" in _help(name)


@pytest.mark.parametrize("name", [m.NAME for m in discover(tiered_kv.bench)])
def test_each_benchmark_has_help(name):
    assert "--json" in _help("bench", name)


def test_parser_builds_in_process():
    assert build_parser().prog == "tiered-kv"
