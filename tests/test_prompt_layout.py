"""Prompt layout: a volatile per-call line at depth d (trace transform and generator option)."""

import math
from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from tiered_kv.sim.traces import insert_volatile_block, random_trace, validate_frame
from tiered_kv.sim.workload import PRESETS, generate, infinite_hit_rate


def _brute(df: pl.DataFrame, depth: float, mask) -> list[list[int]]:
    """Row by row: keep blocks before the depth, then one fresh id per later block plus one."""
    fresh = max(max(r) for r in df["block_ids"].to_list()) + 1
    out = []
    for r, (ids, bs, n) in enumerate(zip(df["block_ids"].to_list(), df["block_size"].to_list(),
                                         df["input_length"].to_list(), strict=True)):
        if not mask[r]:
            out.append(ids)
            continue
        k = min(int(depth // bs) if math.isfinite(depth) else len(ids), n // bs)
        new = ids[:k]
        for _ in range(len(ids) - k + 1):
            new.append(fresh)
            fresh += 1
        out.append(new)
    return out


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("depth", [0, 4, 9, 12, 1e9, math.inf])
def test_insert_volatile_block_equals_row_by_row(seed, depth):
    df = random_trace(seed, 40)
    mask = np.random.default_rng(seed + 100).random(df.height) < 0.6
    got = insert_volatile_block(df, depth, mask=mask)
    validate_frame(got)
    assert got["block_ids"].to_list() == _brute(df, depth, mask)
    assert (got["input_length"] - df["input_length"]).to_list() == [4 * int(m) for m in mask]
    assert got.drop("block_ids", "input_length").equals(df.drop("block_ids", "input_length"))


def test_depth_zero_destroys_every_hit_and_the_end_costs_one_block():
    df = random_trace(3, 60)
    base = infinite_hit_rate(df)
    assert base > 0.2
    assert infinite_hit_rate(insert_volatile_block(df, 0, 1.0)) == 0.0
    end = insert_volatile_block(df, math.inf, 1.0)
    hit_tokens_base = base * df["input_length"].sum()
    hit_tokens_end = infinite_hit_rate(end) * end["input_length"].sum()
    # at the end it costs the inserted block and, at most, the re-keyed partial last block
    assert hit_tokens_base - (df["input_length"] % 4).sum() - 1e-6 <= hit_tokens_end <= hit_tokens_base + 1e-6
    assert insert_volatile_block(df, 0, 0.0).equals(df)
    with pytest.raises(ValueError, match="fraction"):
        insert_volatile_block(df, 0, 1.5)
    with pytest.raises(ValueError, match="depth_tokens"):
        insert_volatile_block(df, -1, 1.0)


def _agent(**kw):
    return replace(PRESETS["ci"], classes=tuple(
        replace(c, **kw) if c.name == "agent" else c for c in PRESETS["ci"].classes))


def test_generator_option_above_and_below_the_stable_prefix():
    plain = generate("ci", 0.5, 0)
    above = generate(_agent(volatile_depth_tokens=0.0), 0.5, 0)
    below = generate(_agent(volatile_depth_tokens=0.0, volatile_below_prefix=True), 0.5, 0)
    none = generate(_agent(volatile_depth_tokens=0.0, volatile_fraction=0.0), 0.5, 0)
    assert none.equals(plain)
    # the other class is untouched, the agent class gains one block per request
    for df in (above, below):
        chat = df.filter(pl.col("traffic_class") == "chatbot")
        assert chat.equals(plain.filter(pl.col("traffic_class") == "chatbot"))
        agent, agent0 = df.filter(pl.col("traffic_class") == "agent"), plain.filter(pl.col("traffic_class") == "agent")
        assert ((agent["input_length"] - agent0["input_length"]) == 512).all()
    rate = {name: infinite_hit_rate(df, traffic_class="agent")
            for name, df in (("plain", plain), ("above", above), ("below", below))}
    assert rate["above"] == 0.0
    assert 0.0 < rate["below"] < rate["plain"]
    with pytest.raises(ValueError, match="volatile_fraction"):
        _agent(volatile_fraction=2.0)
    with pytest.raises(ValueError, match="volatile_depth_tokens"):
        _agent(volatile_depth_tokens=math.nan)


def test_figure_17_depth_table_quick():
    from tiered_kv.viz.prompt_layout import SERIES, depth_table

    data, below = depth_table(quick=True, depths=(0, 2048))
    assert set(data["series"]) == set(SERIES)
    for s in SERIES:
        sel = data.filter(pl.col("series") == s).sort("depth_tokens")
        rates = sel["token_hit_rate"].to_list()  # no line, depth 0, 2048, the end
        assert rates[1] == 0.0 and rates[1] <= rates[2] <= rates[3] <= rates[0]
    assert set(below["series"]) == set(SERIES[:2])
