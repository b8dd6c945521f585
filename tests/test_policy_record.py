"""`tiered-kv bench policies` (replay time of every policy) and its page, which
`tiered-kv bench record policies` writes from its JSON and the libcachesim section of `bench peers`."""

from __future__ import annotations

import json
import statistics

import pytest

from tiered_kv.bench import policies as rec
from tiered_kv.bench._pages import NO_MACHINE_NOTE
from tiered_kv.cli import main

#: A small run: 2 days of the `ci` preset, four policies, two rounds.
ARGV = ["bench", "policies", "--preset", "ci", "--days", "2", "--repeat", "2", "--policies", "lru,belady,fifo,ttl",
        "--json"]


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """A small run: 2 days of the `ci` preset, four policies, two rounds."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(ARGV) == 0
    return json.loads(buf.getvalue())


def test_rounds_rotate_the_order_and_keep_every_run():
    """A clock that advances by a known amount per call: every run lands under its policy in
    round order, and the median is the middle run, not the best."""
    took = {("a", 0): 5.0, ("b", 0): 1.0, ("c", 0): 2.0, ("a", 1): 1.0, ("b", 1): 9.0, ("c", 1): 3.0,
            ("a", 2): 2.0, ("b", 2): 4.0, ("c", 2): 7.0}
    now = [0.0]
    calls: list[str] = []

    def job(name):
        r = calls.count(name)  # the round this call belongs to

        def call():
            calls.append(name)
            now[0] += took[(name, r)]
            return name, r
        return call

    seen = []
    wall, cpu, ran = rec.timed_rounds(["a", "b", "c"], 3, job, lambda name, out: seen.append(out),
                                      clock=lambda: now[0], cpu_clock=lambda: 0.0)
    assert ran == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert wall == {"a": [5.0, 1.0, 2.0], "b": [1.0, 9.0, 4.0], "c": [2.0, 3.0, 7.0]}
    assert cpu == {"a": [0.0] * 3, "b": [0.0] * 3, "c": [0.0] * 3}
    assert seen == [("a", 0), ("b", 0), ("c", 0), ("b", 1), ("c", 1), ("a", 1), ("c", 2), ("a", 2), ("b", 2)]
    assert rec._stats(wall["b"]) == {"median_s": 4.0, "min_s": 1.0, "max_s": 9.0, "runs_s": [1.0, 9.0, 4.0]}


def test_bench_policies_hit_rates_are_the_replays_of_the_same_trace(bench):
    """Each policy's hit rate is what an independent replay of the regenerated trace gives."""
    from tiered_kv.sim.policies import get_policy
    from tiered_kv.sim.trace_replay import compile_trace, replay
    from tiered_kv.sim.workload import synth

    assert list(bench["policies"]) == ["lru", "belady", "fifo", "ttl"]
    assert bench["workload"]["scale"] == 1.0 and bench["repeat"] == 2
    trace = compile_trace(synth.generate("ci", 2.0, 0))
    assert bench["workload"]["block_accesses"] == trace.n_accesses
    cap = bench["capacity_tokens"]
    for name in ("lru", "fifo", "belady"):
        assert bench["policies"][name]["token_hit_rate"] == replay(trace, get_policy(name, capacity_tokens=cap)
                                                                   ).token_hit_rate, name
    for d in bench["policies"].values():
        assert len(d["runs_s"]) == 2 and d["median_s"] == statistics.median(d["runs_s"])
        assert d["ssd_bytes_written"] > 0


def test_record_renders_every_number_from_the_json(bench):
    peers = {"trace": "/x/conversation_trace.jsonl", "requests": 12031, "libcachesim": {
        "status": {"available": True, "detail": "0.3.5"}, "capacities_blocks": [1, 10, 100],
        "block_accesses": 288500, "repeat": 3, "timing": "median of interleaved rounds",
        "LRU": {"ours_policy": "class-lru", "identical": True, "peer_seconds": 1.5, "ours_seconds": 0.25,
                "speedup_vs_peer": 6.0, "cpu_speedup_vs_peer": 5.5, "peer_seconds_all": [1.4, 1.5, 1.6],
                "ours_seconds_all": [0.2, 0.25, 0.3]},
        "FIFO": {"ours_policy": "fifo", "identical": False, "peer_seconds": 1.0, "ours_seconds": 0.5,
                 "speedup_vs_peer": 2.0, "cpu_speedup_vs_peer": 2.1, "peer_seconds_all": [1.0],
                 "ours_seconds_all": [0.5]}}}
    bench = {**bench, "recorded": {"command": "CMD-A"}}
    peers = {**peers, "recorded": {"command": "CMD-B"}}
    text = rec.render_record(bench, peers)
    assert "CMD-A" in text and "CMD-B" in text
    for name, d in bench["policies"].items():
        assert f"| `{name}` | {rec._t(d['median_s'])} |" in text
    assert f"{bench['workload']['block_accesses']:,} block accesses" in text
    assert "full scale" in text
    # speed-up per round: 1.4 / 0.2, 1.5 / 0.25, 1.6 / 0.3 = 7.0, 6.0, 5.33 -> median 6.0
    assert "| LRU | `class-lru` | yes | 1.50 s (1.40 s, 1.50 s, 1.60 s) | 250 ms (200 ms, 250 ms, 300 ms) | " \
        "6.0x (5.3x-7.0x, 3 pairs) | 5.5x |" in text
    assert "| FIFO | `fifo` | **no** |" in text and "for 1 of 2 policies" in text
    scaled = {**bench, "workload": {**bench["workload"], "scale": 0.25}}
    assert "0.25 of the preset's request rates" in rec.render_record(scaled, None)
    empty = rec.render_record(None, None)
    assert "No `tiered-kv bench policies --json` record yet" in empty and "No libcachesim section" in empty


def test_record_writes_the_page(tmp_path, bench):
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (tmp_path / "p.json").write_text(json.dumps(bench))
    assert main(["bench", "record", "policies", str(tmp_path / "p.json"), "--root", str(tmp_path)]) == 0
    page = (results / "policies.md").read_text()
    assert page.startswith("# Policy arena") and "No libcachesim section" in page
    assert f"Machine: {NO_MACHINE_NOTE}" in page  # no note given: the page says so
    # the command that ran (bench --json records it), not the benchmark's bare default
    ran = "tiered-kv " + " ".join(ARGV)
    assert rec.COMMAND != ran and json.loads((results / "policies.json").read_text())["recorded"]["command"] == ran
    assert ran in page
    assert main(["bench", "record", "policies", "--root", str(tmp_path), "--machine", "quiet, 2 cores"]) == 0
    assert "\n\nMachine: quiet, 2 cores\n\n" in (results / "policies.md").read_text()


@pytest.mark.parametrize("argv, match", [(["--policies", "lru,nosuch"], "unknown"), (["--repeat", "0"], "repeat"),
                                         (["--capacity-fraction", "2"], "capacity-fraction")])
def test_bench_policies_bad_input(capsys, argv, match):
    assert main(["bench", "policies", "--preset", "ci", "--days", "0.1", *argv]) == 2
    assert match in capsys.readouterr().err


def test_an_unknown_preset_is_one_line_naming_the_flag_and_the_presets(capsys):
    """`--preset nosuch` raised a KeyError traceback from inside the run; argparse now refuses it."""
    assert main(["bench", "policies", "--preset", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "argument --preset: must be one of chatbot, agent, mixed, ci, got 'nosuch'" in err
