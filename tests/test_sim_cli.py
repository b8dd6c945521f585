"""`tiered-kv simulate` and `tiered-kv curves` answer on the shipped trace with exact semantics."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from tiered_kv.cli import main
from tiered_kv.sim.policies import get_policy
from tiered_kv.sim.trace_replay import compile_trace, replay
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
                             "tiered_kv.commands._common", "tiered_kv.commands._cluster_options"}


def _docs_command(tmp_path):
    """docs/policies.md's command line for the MRU plug-in, with its file written from the docs."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "policies.md").read_text()
    code = re.search(r"## Writing a policy.*?```python\n(.*?)```", text, re.S).group(1)
    line = re.search(r"`(tiered-kv curves --trace conversation --policy\s+path/to/mru\.py:MRU[^`]*)`", text).group(1)
    (tmp_path / "mru.py").write_text(code)
    return line.replace("path/to/mru.py", str(tmp_path / "mru.py")).split()[1:]


def test_curves_policy_docs_example_runs(capsys, tmp_path, conversation):
    """The docs' plug-in command (fewer capacities): MRU and one-pass LRU, hit rates and SSD wear."""
    argv = _docs_command(tmp_path)
    out = run_json(capsys, *argv, "--points", "3", "--belady-points", "0", "--workers", "2", "--json")
    pols = out["policies"]
    assert list(pols) == [argv[argv.index("--policy") + 1], "lru"]
    mru, lru = pols.values()
    assert lru["method"] == "one-pass" and mru["method"] == "replay"
    assert lru["hit_tokens"] == out["lru_hit_tokens"]
    for d in (mru, lru):
        assert len(d["ssd_bytes_written"]) == 3 and all(w > 0 for w in d["ssd_bytes_written"])
        assert all(x is not None for x in d["drive_writes_per_day"] + d["bytes_written_per_hit_byte"][1:])
    assert mru["token_hit_rate"][-1] == pytest.approx(out["infinite_token_hit_rate"])  # the footprint fits


def test_curves_policy_one_pass_lru_equals_replays(capsys, conversation):
    """One-pass LRU (hits and writes) equals class-lru replays; second-sighting writes less."""
    from tiered_kv.sim.policies import get_policy

    out = run_json(capsys, "curves", "--trace", "conversation", "--points", "4", "--belady-points", "4",
                   "--policy", "lru", "class-lru", "belady", "fifo", "--workers", "1", "--json")
    pols = out["policies"]
    assert pols["lru"]["hit_tokens"] == pols["class-lru"]["hit_tokens"]
    assert pols["lru"]["ssd_bytes_written"] == pytest.approx(pols["class-lru"]["ssd_bytes_written"])
    assert pols["belady"]["hit_tokens"] == out["belady_hit_tokens"]
    assert all(b >= f for b, f in zip(pols["belady"]["hit_tokens"], pols["fifo"]["hit_tokens"], strict=True))
    for j, cap in enumerate(out["capacity_tokens"]):  # the replay path is the policy's own run
        run = get_policy("fifo", capacity_tokens=cap).run(conversation)
        assert run.extra["ssd_bytes_written"] == pytest.approx(pols["fifo"]["ssd_bytes_written"][j])
    ss = run_json(capsys, "curves", "--trace", "conversation", "--points", "4", "--belady-points", "0",
                  "--policy", "lru", "--admission", "second-sighting", "--workers", "1", "--json")["policies"]["lru"]
    assert ss["replayed_as"] == "class-lru" and ss["admission"] == "second-sighting"
    assert sum(ss["ssd_bytes_written"]) < sum(pols["lru"]["ssd_bytes_written"])


@pytest.mark.parametrize("policy, match", [("nosuch", "must be one of"), ("lfu:aging_accesses=-1", "aging_accesses"),
                                           ("missing.py:X", "no such policy file")])
def test_curves_policy_bad_names(capsys, policy, match):
    assert main(["curves", "--trace", "conversation", "--points", "2", "--policy", policy, "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err


def test_the_tiered_kv_process_ends_without_teardown_and_loses_no_output():
    """`curves` and `simulate` set FAST_EXIT: the process ends right after them, output flushed."""
    cmd = [sys.executable, "-m", "tiered_kv.cli"]
    ok = subprocess.run([*cmd, "curves", "--trace", "conversation", "--points", "4", "--ttl-points", "4",
                         "--belady-points", "2", "--json"], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert len(json.loads(ok.stdout)["capacity_tokens"]) == 4
    bad = subprocess.run([*cmd, "simulate", "--trace", "missing.jsonl"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "trace file not found" in bad.stderr
