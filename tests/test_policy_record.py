"""`tiered-kv bench policies` (replay time of every policy) and scripts/policy_record.py, which
writes benchmarks/results/policies.md from its JSON and the libcachesim section of `bench peers`."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tiered_kv.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _record():
    spec = importlib.util.spec_from_file_location("policy_record", ROOT / "scripts" / "policy_record.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """A small run: 2 days of the `ci` preset, four policies, two rounds."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["bench", "policies", "--preset", "ci", "--days", "2", "--repeat", "2",
                     "--policies", "lru,belady,fifo,ttl", "--json"]) == 0
    return json.loads(buf.getvalue())


def test_bench_policies_times_every_policy_in_interleaved_rounds(bench):
    from tiered_kv.sim.policies import get_policy
    from tiered_kv.sim.trace_replay import compile_trace, replay
    from tiered_kv.sim.workload import synth

    assert list(bench["policies"]) == ["lru", "belady", "fifo", "ttl"]
    assert bench["workload"]["scale"] == 1.0 and bench["repeat"] == 2
    trace = compile_trace(synth.generate("ci", 2.0, 0))
    assert bench["workload"]["block_accesses"] == trace.n_accesses
    for d in bench["policies"].values():
        assert len(d["runs_s"]) == 2 and d["min_s"] <= d["median_s"] <= d["max_s"]
        assert d["ssd_bytes_written"] > 0
    cap = bench["capacity_tokens"]
    assert bench["policies"]["fifo"]["token_hit_rate"] == replay(trace, get_policy("fifo", capacity_tokens=cap)
                                                                 ).token_hit_rate
    assert bench["policies"]["belady"]["token_hit_rate"] >= bench["policies"]["lru"]["token_hit_rate"]


def test_record_renders_every_number_from_the_json(bench):
    rec = _record()
    peers = {"trace": "/x/conversation_trace.jsonl", "requests": 12031, "libcachesim": {
        "status": {"available": True, "detail": "0.3.5"}, "capacities_blocks": [1, 10, 100],
        "block_accesses": 288500, "repeat": 3, "timing": "median of interleaved rounds",
        "LRU": {"ours_policy": "class-lru", "identical": True, "peer_seconds": 1.5, "ours_seconds": 0.25,
                "speedup_vs_peer": 6.0, "cpu_speedup_vs_peer": 5.5, "peer_seconds_all": [1.4, 1.5, 1.6],
                "ours_seconds_all": [0.2, 0.25, 0.3]},
        "FIFO": {"ours_policy": "fifo", "identical": False, "peer_seconds": 1.0, "ours_seconds": 0.5,
                 "speedup_vs_peer": 2.0, "cpu_speedup_vs_peer": 2.1, "peer_seconds_all": [1.0],
                 "ours_seconds_all": [0.5]}}}
    text = rec.render(bench, peers, "CMD-A", "CMD-B")
    assert "CMD-A" in text and "CMD-B" in text
    for name, d in bench["policies"].items():
        assert f"| `{name}` | {rec._t(d['median_s'])} |" in text
    assert f"{bench['workload']['block_accesses']:,} block accesses" in text
    assert "full scale" in text
    assert "| LRU | `class-lru` | yes | 1.50 s (1.40 s, 1.50 s, 1.60 s) | 250 ms (200 ms, 250 ms, 300 ms) | 6.0x | 5.5x |" \
        in text
    assert "| FIFO | `fifo` | **no** |" in text and "for 1 of 2 policies" in text
    scaled = {**bench, "workload": {**bench["workload"], "scale": 0.25}}
    assert "0.25 of the preset's request rates" in rec.render(scaled, None)
    empty = rec.render(None, None)
    assert "No `tiered-kv bench policies --json` record yet" in empty and "No libcachesim section" in empty


def test_record_writes_the_page(tmp_path, bench):
    rec = _record()
    (tmp_path / "p.json").write_text(json.dumps(bench))
    out = tmp_path / "policies.md"
    assert rec.main(["--policies-json", str(tmp_path / "p.json"), "--peers-json", str(tmp_path / "none.json"),
                     "--out", str(out)]) == 0
    assert out.read_text().startswith("# Policy arena")


@pytest.mark.parametrize("argv, match", [(["--policies", "lru,nosuch"], "unknown"), (["--repeat", "0"], "repeat"),
                                         (["--capacity-fraction", "2"], "capacity-fraction")])
def test_bench_policies_bad_input(capsys, argv, match):
    assert main(["bench", "policies", "--preset", "ci", "--days", "0.1", *argv]) == 2
    assert match in capsys.readouterr().err
