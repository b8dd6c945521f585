"""SSD wear of ``lru``, ``ttl``, ``watermark`` and ``belady``, not only of the zoo.

Every run reports bytes written, bytes written per hit byte and drive writes per day; here
each count is checked against an independent computation (a brute-force replay of the LRU
family, LRU stack distances, raw reuse times, and Belady's one-pass stack against its
replay), and ``policy_curves`` / the CLI are checked to report them for all four.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_kv.cli import main
from tiered_kv.sim import curves as C
from tiered_kv.sim.policies import get_policy, next_use
from tiered_kv.sim.policies.belady import belady_stack
from tiered_kv.sim.trace_replay import compile_trace, replay
from tiered_kv.sim.traces import load_trace, random_trace, shipped_trace
from tiered_kv.units import DEFAULT_BYTES_PER_TOKEN

WEAR = ("ssd_bytes_written", "bytes_written_per_hit_byte", "drive_writes_per_day", "tokens_written",
        "blocks_written", "simulated_days")


@pytest.fixture(scope="module")
def conversation():
    return compile_trace(load_trace(shipped_trace("conversation")))


def _brute_lru_family(t, *, slots=math.inf, ttl=None, weights=None, high=None, low=None):
    """Lookup-then-touch replay in plain Python: (leading hits per request, inserted per access).

    One global LRU order; a block expires when idle longer than the TTL of the class that last
    touched it (checked at each request); after an insert that lifts the used weight above
    ``high``, least recently used blocks go until it is at most ``low``.
    """
    high = slots if high is None else high
    low = high if low is None else low
    order: dict[int, None] = {}  # LRU first
    last, cls_of, wt = {}, {}, {}
    used = 0.0
    hits = np.zeros(t.n_requests, np.int64)
    ins = np.zeros(t.n_accesses, bool)
    for r in range(t.n_requests):
        now, c = float(t.timestamps[r]), int(t.class_codes[r])
        if ttl is not None:
            for b in [b for b in order if now - last[b] > ttl[cls_of[b]]]:
                del order[b]
                used -= wt[b]
        lo, hi = int(t.offsets[r]), int(t.offsets[r + 1])
        p = 0
        while lo + p < hi and int(t.blocks[lo + p]) in order:
            p += 1
        hits[r] = p
        for i in range(lo, hi):
            b = int(t.blocks[i])
            if b in order:
                del order[b]
            else:
                ins[i] = True
                wt[b] = 1.0 if weights is None else float(weights[i])
                used += wt[b]
            order[b] = None
            last[b], cls_of[b] = now, c
            if used > high:
                while used > low and order:
                    v = next(iter(order))
                    del order[v]
                    used -= wt[v]
    return hits, ins


def _tokens(t, ins):
    return int(t.chunk_tokens[ins].sum())


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), cap=st.integers(1, 24), ttl=st.sampled_from([0.0, 2.0, 7.0, math.inf]))
def test_lru_and_ttl_writes_equal_a_brute_force_replay(seed, cap, ttl):
    t = compile_trace(random_trace(seed, 70, max_gap_s=4))
    run = get_policy("lru", capacity_tokens=cap * t.uniform_block_size).run(t)
    hits, ins = _brute_lru_family(t, slots=cap)
    assert np.array_equal(run.hit_blocks, hits)
    assert run.extra["tokens_written"] == _tokens(t, ins) and run.extra["blocks_written"] == int(ins.sum())
    ttls = {"chatbot": ttl, "agent": 2 * ttl}
    run = get_policy("ttl", ttl_seconds=ttls, capacity_tokens=cap * t.uniform_block_size).run(t)
    hits, ins = _brute_lru_family(t, slots=cap, ttl=[ttls[n] for n in t.class_names])
    assert np.array_equal(run.hit_blocks, hits)
    assert run.extra["tokens_written"] == _tokens(t, ins)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), cap=st.integers(1, 24), marks=st.sampled_from([(1.0, 1.0), (0.9, 0.6)]))
def test_watermark_writes_equal_a_brute_force_replay(seed, cap, marks):
    t = compile_trace(random_trace(seed, 70))
    bpt = 3.0
    cap_bytes = int(cap * t.uniform_block_size * bpt)
    run = get_policy("watermark", capacity_bytes=cap_bytes, high=marks[0], low=marks[1], bytes_per_token=bpt).run(t)
    w = t.chunk_tokens.astype(float) * bpt
    hits, ins = _brute_lru_family(t, weights=w, high=marks[0] * cap_bytes, low=marks[1] * cap_bytes)
    assert np.array_equal(run.hit_blocks, hits)
    assert run.extra["tokens_written"] == _tokens(t, ins)
    assert run.extra["drive_writes_per_day"] == pytest.approx(
        _tokens(t, ins) * bpt / run.extra["simulated_days"] / cap_bytes)


def test_lru_writes_equal_the_stack_distance_pass_and_ttl_writes_the_reuse_times(conversation):
    t = conversation
    caps = C.default_capacities(t, 9)
    one_pass = C.lru_written_tokens(t, caps)
    for j, c in enumerate(caps):
        assert get_policy("lru", capacity_tokens=int(c)).run(t).extra["tokens_written"] == one_pass[j]
    prev = np.full(t.n_unique, -np.inf)  # raw reuse time of every access: written iff > TTL or first
    reuse = np.empty(t.n_accesses)
    now = t.timestamps[t.access_request]
    for i, b in enumerate(t.blocks):  # noqa: B007 - plain loop, the reference
        reuse[i] = now[i] - prev[b]
        prev[b] = now[i]
    for ttl in (1.0, 60.0, 600.0, math.inf):
        run = get_policy("ttl", default_ttl_seconds=ttl).run(t)
        assert run.extra["tokens_written"] == int(t.chunk_tokens[(reuse > ttl) | np.isinf(reuse)].sum())


@pytest.mark.parametrize("seed", range(6))
def test_belady_writes_one_pass_equals_replays_and_skips_blocks_never_used_again(seed):
    t = compile_trace(random_trace(seed, 90, max_blocks=8))
    caps = C.default_capacities(t, 10)
    stacked = belady_stack(t, caps // t.uniform_block_size)
    assert stacked is not None
    nxt = next_use(t)
    for j, c in enumerate(caps):
        run = get_policy("belady", capacity_tokens=int(c)).run(t, nxt=nxt)
        assert run.extra["tokens_written"] == stacked[1][j]
    # at the footprint nothing is ever evicted: every block used again is written once, at its first sighting
    first = np.zeros(t.n_accesses, bool)
    first[np.unique(t.blocks, return_index=True)[1]] = True
    want = int(t.chunk_tokens[first & (nxt < t.n_accesses)].sum())
    assert get_policy("belady").run(t).extra["tokens_written"] == want


def test_belady_curve_writes_on_the_real_trace(conversation):
    t = conversation
    caps = C.default_capacities(t, 6)
    curve = C.belady_curve(t, caps)
    nxt = next_use(t)
    for j, c in enumerate(caps):
        run = get_policy("belady", capacity_tokens=int(c)).run(t, nxt=nxt)
        assert curve.written_tokens[j] == run.extra["tokens_written"]
        assert curve.hit_tokens[j] == replay(t, get_policy("belady", capacity_tokens=int(c))).hit_tokens


def test_policy_curves_reports_wear_for_lru_ttl_watermark_and_belady(conversation):
    t = conversation
    caps = C.default_capacities(t, 4)
    specs = ["lru", "belady", "ttl:default_ttl_seconds=600", "watermark:high=0.9,low=0.8"]
    out = C.policy_curves(t, specs, caps, workers=1)
    for spec in specs:
        d = out[spec]
        for key in ("ssd_bytes_written", "bytes_written_per_hit_byte", "drive_writes_per_day"):
            assert all(v is not None for v in d[key]), (spec, key)
        assert all(w > 0 for w in d["ssd_bytes_written"]), spec
    assert out["lru"]["method"] == out["belady"]["method"] == "one-pass"
    bpt = DEFAULT_BYTES_PER_TOKEN
    for j, c in enumerate(caps):  # each one is the policy's own run at that capacity
        ttl = get_policy("ttl", default_ttl_seconds=600.0, capacity_tokens=int(c)).run(t)
        assert out[specs[2]]["ssd_bytes_written"][j] == pytest.approx(ttl.extra["ssd_bytes_written"])
        wm = get_policy("watermark", capacity_bytes=int(c * bpt), high=0.9, low=0.8).run(t)
        assert out[specs[3]]["ssd_bytes_written"][j] == pytest.approx(wm.extra["ssd_bytes_written"])
        bel = get_policy("belady", capacity_tokens=int(c)).run(t)
        assert out["belady"]["ssd_bytes_written"][j] == pytest.approx(bel.extra["ssd_bytes_written"])
        assert out["belady"]["drive_writes_per_day"][j] == pytest.approx(bel.extra["drive_writes_per_day"])
        lru = get_policy("lru", capacity_tokens=int(c)).run(t)
        assert out["lru"]["ssd_bytes_written"][j] == pytest.approx(lru.extra["ssd_bytes_written"])
        assert out["lru"]["bytes_written_per_hit_byte"][j] == pytest.approx(lru.extra["bytes_written_per_hit_byte"])
    # the bound hits most and, here, writes least: it writes only blocks it will hit
    assert all(b <= w for b, w in zip(out["belady"]["ssd_bytes_written"], out["lru"]["ssd_bytes_written"],
                                      strict=True))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_zoo_policys_curve_wear_is_its_own_runs_at_every_capacity_unlimited_too(seed):
    """One wear rule: the curve's point is the policy's own run (the same floats, not approximately),
    and an unlimited capacity counts as the trace's footprint in both."""
    t = compile_trace(random_trace(seed, 80, max_gap_s=4))
    caps = [3 * t.uniform_block_size, 7 * t.uniform_block_size + 5, math.inf]
    out = C.policy_curves(t, ["fifo", "s3fifo", "lfu"], caps, workers=1)
    for spec, d in out.items():
        for j, c in enumerate(caps):
            pol = get_policy(spec, capacity_tokens=None if math.isinf(c) else int(c))
            run, (_, ins, _) = pol.run(t), pol.block_run(t)
            assert run.extra["tokens_written"] == _tokens(t, ins) and run.extra["blocks_written"] == int(ins.sum())
            for key in ("ssd_bytes_written", "bytes_written_per_hit_byte", "drive_writes_per_day"):
                assert d[key][j] == run.extra[key], (spec, c, key)
        assert d["simulated_days"] == run.extra["simulated_days"]


@pytest.mark.parametrize("argv", [["lru", "--capacity", "1000000"], ["belady", "--capacity", "64GiB"],
                                  ["ttl", "--ttl", "10m"], ["watermark", "--capacity", "1TiB"]])
def test_simulate_json_reports_wear_at_the_bytes_per_token_given(capsys, argv):
    def run(*extra):
        assert main(["simulate", "--trace", "conversation", "--policy", *argv, *extra, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    out = run()
    assert all(out[k] is not None for k in WEAR), {k: out.get(k) for k in WEAR}
    assert out["ssd_bytes_written"] == pytest.approx(out["tokens_written"] * out["bytes_per_token"])
    if argv[0] in ("lru", "ttl"):  # capacities in tokens: the decisions do not depend on the bytes
        half = run("--bytes-per-token", str(DEFAULT_BYTES_PER_TOKEN / 2))
        assert half["tokens_written"] == out["tokens_written"]
        assert half["ssd_bytes_written"] == pytest.approx(out["ssd_bytes_written"] / 2)
    assert main(["simulate", "--trace", "conversation", "--policy", *argv]) == 0
    assert "SSD writes" in capsys.readouterr().out
