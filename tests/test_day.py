"""The DeepSeek-scale day, at a tiny scale: shards, the streaming replay against the replay engine, bad shards."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

from tiered_kv.sim.day import DayConfig, generate_day, read_manifest, replay_day

TTL = {"agent": 3 * 86_400.0, "chatbot": 7 * 86_400.0}


@pytest.fixture(scope="module")
def day(tmp_path_factory):
    root = tmp_path_factory.mktemp("day")
    cfg = DayConfig(input_tokens_per_day=2e8, days=2.0, warmup_days=1.0, tokens_per_part=8e7, seed=3)
    generate_day(root, cfg, workers=1, progress=False)
    return root


def _as_trace_frame(root):
    """Every shard as one trace frame in the dataset's replay order, ids made global."""
    m = read_manifest(root)
    base = {p["part"]: p["id_base"] for p in m["parts"]}
    hours = [pl.read_parquet(sorted((root / f"hour={h:04d}").glob("*.parquet"))).sort("timestamp_s", maintain_order=True)
             for h in range(m["hours"])]
    df = pl.concat(hours)
    ids = [(np.asarray(b, dtype=np.uint64) + np.uint64(base[p])) for b, p in zip(df["block_ids"].to_list(), df["part"], strict=True)]
    return pl.DataFrame({
        "request_id": np.arange(df.height), "timestamp_s": df["timestamp_s"], "input_length": df["input_length"].cast(pl.Int64),
        "output_length": np.ones(df.height, dtype=np.int64), "block_size": np.full(df.height, m["block_size"], dtype=np.int32),
        "traffic_class": [m["classes"][c] for c in df["class_code"]],
        "session_id": ["s"] * df.height, "turn": np.zeros(df.height, dtype=np.int32),
        "block_ids": pl.Series(ids, dtype=pl.List(pl.UInt64)),
    })


def test_manifest_parts_and_ids(day):
    m = read_manifest(day)
    assert len(m["parts"]) == 3 and m["hours"] == 48
    assert m["accesses"] > 100_000
    # the day's input tokens are what was asked for, within the pilot's estimate
    assert 0.8 < m["input_tokens"] / (2e8 * 2) < 1.25
    bases = [p["id_base"] for p in m["parts"]]
    assert bases == sorted(bases) and m["n_ids"] == bases[-1] + m["parts"][-1]["n_ids"]


def test_streaming_replay_equals_the_replay_engine(day):
    from tiered_kv.sim.policies import get_policy
    from tiered_kv.sim.trace_replay import compile_trace, replay

    m = read_manifest(day)
    cap_blocks = 20_000
    got = replay_day(day, capacities={"lru": cap_blocks, "inf": math.inf},
                     ttls={"ttl": TTL, "1h": {"agent": 3600.0, "chatbot": 3600.0}}, progress=False)
    trace = compile_trace(_as_trace_frame(day))
    counted = trace.timestamps >= 86_400.0
    assert got["requests"] == int(counted.sum())
    for name, policy in [("lru", get_policy("lru", capacity_tokens=cap_blocks * m["block_size"])),
                         ("inf", get_policy("lru")), ("ttl", get_policy("ttl", ttl_seconds=TTL)),
                         ("1h", get_policy("ttl", ttl_seconds={"agent": 3600.0, "chatbot": 3600.0}))]:
        want = int(replay(trace, policy).hit_tokens_per_request[counted].sum())
        assert got["policies"][name]["hit_tokens"] == want, name
    # one cold day: a TTL of days never expires within it, so it equals the unlimited cache
    assert got["policies"]["ttl"]["hit_tokens"] == got["policies"]["inf"]["hit_tokens"]
    assert json.dumps(got, allow_nan=False)


def test_a_corrupt_shard_names_its_file(day, tmp_path):
    import shutil

    root = tmp_path / "bad"
    shutil.copytree(day, root)
    victim = sorted((root / "hour=0030").glob("*.parquet"))[1]
    victim.write_bytes(victim.read_bytes()[:200] + b"garbage")
    with pytest.raises(ValueError, match=rf"{victim.name}.*row"):
        replay_day(root, progress=False)


def test_an_impossible_row_names_its_file_and_row(day, tmp_path):
    import shutil

    root = tmp_path / "bad"
    shutil.copytree(day, root)
    victim = sorted((root / "hour=0030").glob("*.parquet"))[0]
    df = pl.read_parquet(victim)
    df = df.with_columns(pl.when(pl.int_range(pl.len()) == 5).then(pl.lit(-1, pl.Int32))
                         .otherwise(pl.col("input_length")).alias("input_length"))
    df.write_parquet(victim)
    with pytest.raises(ValueError, match=rf"{victim.name}: row 5: input_length"):
        replay_day(root, progress=False)


def test_day_config_names_the_key_and_range():
    with pytest.raises(ValueError, match=r"warmup_days: 2.*\[0, days\)"):
        DayConfig(days=2, warmup_days=2)
    with pytest.raises(ValueError, match="input_tokens_per_day"):
        DayConfig(input_tokens_per_day=0)


def test_day_command_generate_replay_markdown(tmp_path, capsys):
    from tiered_kv.cli import main

    root = tmp_path / "d"
    assert main(["day", "generate", str(root), "--tokens", "2e7", "--tokens-per-part", "1e7", "--workers", "1",
                 "--no-progress"]) == 0
    rec = tmp_path / "r.json"
    assert main(["day", "replay", str(root), "--capacity", "1TiB", "--capacity", "inf", "--ttl", "agent=3d,chatbot=7d",
                 "--record", str(rec), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "lru 1 TiB" in out and "ttl agent=3d chatbot=7d" in out and "peak RSS" in out
    r = json.loads(rec.read_text())
    assert r["parts"] == 2 and r["replay_peak_rss_bytes"] > 0 and r["generated"]["generation_s"] > 0
    assert main(["day", "markdown", str(rec)]) == 0
    md = capsys.readouterr().out
    assert "| lru 1 TiB |" in md and "peak RSS" in md and "empty cache" in md
    assert main(["day", "replay", str(root), "--capacity", "-1TiB", "--no-progress"]) == 2
    assert "--capacity" in capsys.readouterr().err


def test_figure_15_sets_a_steady_state_day_beside_the_published_share(monkeypatch):
    import importlib

    fig = importlib.import_module("tiered_kv.viz.figures.15_deepseek_day")
    monkeypatch.setattr(fig, "QUICK_SCALE", 1 / 100_000)
    monkeypatch.setattr(fig, "RECORDED", fig.RECORDED.with_name("absent.json"))
    r = fig.build(quick=True)
    (claim,) = r.claims
    assert claim.published == 0.56 and 0.2 < claim.reproduced < 0.95
    assert "1/100,000" in claim.inputs and set(r.data["policy"]) >= {fig.TTL_NAME, "lru unlimited"}
    assert r.chart.to_dict()


def test_shards_of_parts_outside_the_manifest_are_ignored(day, tmp_path):
    import shutil

    root = tmp_path / "extra"
    shutil.copytree(day, root)
    src = sorted((root / "hour=0030").glob("*.parquet"))[0]
    shutil.copy(src, src.with_name("part-00099.parquet"))  # e.g. a part whose generation was cut short
    a = replay_day(day, progress=False)["policies"]
    b = replay_day(root, progress=False)["policies"]
    assert a == b


def test_day_policies_read_ttls_with_the_one_grammar():
    """A bare duration is both classes' TTL; a class's own TTL beats it (tiered_kv.units.parse_ttl)."""
    from tiered_kv.sim.day.stream import day_policies

    caps, ttls = day_policies(["inf"], ["1h", "agent=3d,2h"], 70_272.0)
    assert caps == {"lru unlimited": math.inf}
    assert ttls == {"ttl 1h": {"agent": 3600.0, "chatbot": 3600.0},
                    "ttl agent=3d 2h": {"agent": 259_200.0, "chatbot": 7200.0}}
    with pytest.raises(ValueError, match="^--ttl agent: 'soon' is out of range; allowed: a duration"):
        day_policies([], ["agent=soon"], 70_272.0)
