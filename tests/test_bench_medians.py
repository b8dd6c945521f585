"""The benchmarks report medians of interleaved repeats with every repeat beside them, never a
best-of: kernels' paired calls, the peers' interleaved rounds, retention's rounds, synth."""

from __future__ import annotations

import argparse
import itertools
import statistics

import pytest

from tiered_kv.bench import kernels, peers


def _clock(steps: list[float]):
    """A fake clock that advances by the given steps, one per reading after the first."""
    it = itertools.accumulate(itertools.chain([0.0], steps))
    return lambda: next(it)


def test_cpu_pair_is_the_median_of_alternating_calls():
    order: list[str] = []
    # per repeat: baseline then fn; step durations baseline 1, 9, 2 and fn 5, 1, 3 (the warm-up is untimed)
    clock = _clock([1, 5, 0, 9, 1, 0, 2, 3])
    fn_s, base_s, fn_all, base_all = kernels._cpu_pair(lambda: order.append("fn"), lambda: order.append("base"),
                                                       3, clock)
    assert order == ["fn", "base"] + ["base", "fn"] * 3
    assert base_all == [1, 9, 2] and fn_all == [5, 1, 3]
    assert (fn_s, base_s) == (3, 2)  # medians, not the best (1, 1)


def test_kernel_entry_pairs_each_call_with_its_clone():
    # path calls 1, 3, 2 s at 4 B/element; the clone timed before each 1, 1, 4 s at 8 B/element.
    # Per call (4 / t) / (8 / c) = 0.5, 1/6, 1.0 -> median 0.5, worked out by hand; the ratio of
    # the medians, (4 / 2) / (8 / 1) = 0.25, pairs calls that were not timed together.
    e = kernels._entry((2.0, 1.0, [1.0, 3.0, 2.0], [1.0, 1.0, 4.0]), 1000, 4.0, 8 * 1000 / 1.0 / 1e9, None)
    assert e["ratio_vs_clone_all"] == pytest.approx([0.5, 1 / 6, 1.0])
    assert e["ratio_vs_clone"] == pytest.approx(0.25)
    assert kernels._ratio_cell(e) == "**0.500x** (0.167x-1.00x, 3 pairs)"


def test_peers_rounds_interleave_and_keep_every_round():
    calls: list[str] = []

    def peer():
        calls.append("peer")
        return [1, 2]

    def ours():
        calls.append("ours")
        return [1, 2]

    import numpy as np

    rec = peers._timed_compare(lambda: np.array(peer()), lambda: np.array(ours()), 3, "lru")
    assert calls == ["peer", "ours"] * 3
    assert rec["identical"] and rec["repeat"] == 3
    assert len(rec["peer_seconds_all"]) == 3 == len(rec["ours_cpu_seconds_all"])
    assert rec["peer_seconds"] == statistics.median(rec["peer_seconds_all"])


def test_synth_bench_times_every_seed_and_reports_the_median():
    from tiered_kv.bench import synth

    args = argparse.Namespace(days=0.02, seeds=[0, 1], repeat=2, calibration_seeds=[], quick_calibration=True)
    out = synth.run(args)
    g = out["generate"]
    assert [c["seed"] for c in g["calls"]] == [0, 1, 0, 1]
    assert g["seconds"] == statistics.median(g["seconds_all"]) and len(g["seconds_all"]) == 4
    # same seed, same trace
    assert g["calls"][0]["block_accesses"] == g["calls"][2]["block_accesses"] > 0
    assert "calibration" not in out
