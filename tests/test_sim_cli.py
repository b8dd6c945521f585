"""`tiered-kv simulate` and `tiered-kv curves` answer on the shipped trace with exact semantics."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from tiered_kv.cli import main
from tiered_kv.sim.policies import get_policy
from tiered_kv.sim.replay import compile_trace, replay
from tiered_kv.sim.traces import load_trace, shipped_trace


def run_json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def conversation():
    return compile_trace(load_trace(shipped_trace("conversation")))


def test_simulate_json_fields_equal_the_replay(capsys, conversation):
    out = run_json(capsys, "simulate", "--trace", str(shipped_trace()), "--policy", "lru",
                   "--capacity", "1000000", "--json")
    ref = replay(conversation, get_policy("lru", capacity_tokens=1_000_000))
    for key in ("requests", "input_tokens", "hit_tokens", "token_hit_rate"):
        assert out[key] == getattr(ref, key)
    assert out["by_class"]["chatbot"]["hit_tokens"] == ref.hit_tokens


def test_simulate_ttl_bytes_and_watermark(capsys, conversation):
    out = run_json(capsys, "simulate", "--trace", "conversation", "--policy", "ttl", "--ttl", "chatbot=10m", "--json")
    assert out["hit_tokens"] == replay(conversation, get_policy("ttl", ttl_seconds={"chatbot": 600.0})).hit_tokens
    out = run_json(capsys, "simulate", "--trace", "conversation", "--policy", "belady", "--capacity", "64GiB",
                   "--bytes-per-token", "65536", "--json")
    assert out["capacity_tokens"] == 2**20
    wm = run_json(capsys, "simulate", "--trace", "conversation", "--policy", "watermark", "--capacity", "1TiB",
                  "--json")
    ret = wm["effective_retention_s"]["chatbot"]
    assert ret["evictions"] > 0 and 0 < ret["p10_s"] <= ret["p50_s"] <= ret["p90_s"]


def test_curves_json_has_the_design_fields(capsys):
    out = run_json(capsys, "curves", "--trace", "conversation", "--belady-points", "3", "--json")
    for key in ("capacity_tokens", "lru_token_hit_rate", "belady_token_hit_rate", "ttl_seconds",
                "ttl_token_hit_rate", "infinite_token_hit_rate"):
        assert key in out
    assert len(out["capacity_tokens"]) == 100 and len(out["ttl_seconds"]) == 100
    bel = [(b, lr) for b, lr in zip(out["belady_token_hit_rate"], out["lru_token_hit_rate"], strict=True) if b is not None]
    assert len(bel) == 3 and all(lr <= b <= out["infinite_token_hit_rate"] for b, lr in bel)
    assert out["lru_token_hit_rate"][-1] == pytest.approx(out["infinite_token_hit_rate"])


@pytest.mark.parametrize("argv, match", [
    (["simulate", "--trace", "missing.jsonl"], "not found"),
    (["simulate", "--trace", "conversation", "--policy", "ttl"], "--ttl"),
    (["simulate", "--trace", "conversation", "--policy", "watermark"], "needs --capacity"),
    (["simulate", "--trace", "conversation", "--capacity", "12 apples"], "--capacity"),
    (["simulate", "--trace", "conversation", "--policy", "ttl", "--ttl", "nobody=1h"], "not in the trace"),
])
def test_bad_arguments_give_one_clear_line(capsys, argv, match):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err


def test_simulator_commands_import_only_what_they_need():
    """`curves` and `simulate` import their own command modules and no torch, altair, zarr or widgets."""
    code = """
import contextlib, io, sys
from tiered_kv.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    main(["curves", "--trace", "conversation", "--points", "4", "--ttl-points", "4", "--belady-points", "2", "--json"])
    main(["simulate", "--trace", "conversation", "--policy", "lru", "--capacity", "100000", "--json"])
print(sorted(m for m in ("torch", "altair", "zarr", "ipywidgets", "tiered_kv.viz", "tiered_kv.tiers") if m in sys.modules))
print(sorted(m for m in sys.modules if m.startswith("tiered_kv.commands.")))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    heavy, commands = (ast.literal_eval(line) for line in proc.stdout.splitlines()[-2:])
    assert heavy == []
    assert set(commands) <= {"tiered_kv.commands.curves", "tiered_kv.commands.simulate",
                             "tiered_kv.commands._common", "tiered_kv.commands._cluster",
                             "tiered_kv.commands._args"}  # flag types: argparse, math, re only
