"""The policy arena's data: every policy's hit rate and SSD wear at every capacity, precomputed once.

:func:`arena_table` replays each policy (``tiered_kv.sim.curves.policy_curves``: ``lru`` and
``belady`` in one pass, the zoo once per capacity) under each admission filter and returns one
long frame; figure 16 (``tiered-kv reproduce``) and the arena notebook draw from it, and
:func:`summary` says in words which policy wins where, how far each is from Belady, and what
admit-on-second-sighting saves in writes and costs in hits.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

#: The policies the arena shows by default (``belady`` is drawn as the bound).
POLICIES = ("lru", "fifo", "lfu", "arc", "slru", "2q", "s3fifo", "sieve", "gdsf")
ADMISSIONS = ("all", "second-sighting")


def load(trace_name: str = "conversation"):
    """The compiled shipped trace (or trace file), from the compiled-trace cache when it holds it."""
    from tiered_kv.sim.trace_cache import load_compiled_trace
    from tiered_kv.sim.traces import resolve_trace_path

    return load_compiled_trace(resolve_trace_path(trace_name))


def arena_table(trace, policies=POLICIES, *, points: int = 24, admissions=ADMISSIONS, workers: int = 1,
                bytes_per_token: float | None = None, capacities=None) -> pl.DataFrame:
    """Long frame: policy, admission, capacity_tokens, capacity_bytes, token_hit_rate,
    ssd_bytes_written, bytes_written_per_hit_byte, drive_writes_per_day; Belady's rows have
    admission ``"bound"`` and no writes."""
    from tiered_kv.sim import curves as C
    from tiered_kv.sim.policies import DEFAULT_BYTES_PER_TOKEN

    bpt = float(bytes_per_token or DEFAULT_BYTES_PER_TOKEN)
    caps = C.default_capacities(trace, points) if capacities is None else np.asarray(capacities)
    parts = []
    specs = [p for p in policies if p != "belady"]
    for adm in admissions:
        out = C.policy_curves(trace, specs + (["belady"] if adm == admissions[0] else []), caps, admission=adm,
                              bytes_per_token=bpt, workers=workers)
        for spec, d in out.items():
            is_bound = spec == "belady"
            parts.append(pl.DataFrame({
                "policy": "Belady (bound)" if is_bound else spec,
                "admission": "bound" if is_bound else adm,
                "capacity_tokens": np.asarray(caps, dtype=np.int64),
                "token_hit_rate": np.asarray(d["token_hit_rate"], dtype=np.float64),
                "ssd_bytes_written": [math.nan if w is None else float(w) for w in d["ssd_bytes_written"]],
                "bytes_written_per_hit_byte": [math.nan if w is None or not math.isfinite(w) else float(w)
                                               for w in d["bytes_written_per_hit_byte"]],
                "drive_writes_per_day": [math.nan if w is None or not math.isfinite(w) else float(w)
                                         for w in d["drive_writes_per_day"]],
            }))
    return pl.concat(parts).with_columns((pl.col("capacity_tokens") * bpt).alias("capacity_bytes"))


def summary(data: pl.DataFrame) -> dict:
    """Winners per capacity, distance from Belady, and second-sighting's trade (admit-all baseline)."""
    base = data.filter(pl.col("admission") == "all")
    bound = data.filter(pl.col("admission") == "bound").select("capacity_tokens", pl.col("token_hit_rate")
                                                              .alias("belady"))
    wins = []
    for cap, grp in base.group_by("capacity_tokens", maintain_order=True):
        best = grp.sort(["token_hit_rate", "policy"], descending=[True, False]).row(0, named=True)
        tied = sorted(grp.filter(pl.col("token_hit_rate") >= best["token_hit_rate"] - 1e-12)["policy"].to_list())
        wins.append({"capacity_tokens": int(cap[0]), "capacity_bytes": best["capacity_bytes"], "winners": tied,
                     "token_hit_rate": best["token_hit_rate"]})
    gap = base.join(bound, on="capacity_tokens").with_columns((pl.col("belady") - pl.col("token_hit_rate"))
                                                              .alias("gap"))
    dist = gap.group_by("policy", maintain_order=True).agg(pl.col("gap").mean().alias("mean_gap"),
                                                           pl.col("gap").max().alias("max_gap"))
    trade = []
    ss = data.filter(pl.col("admission") == "second-sighting")
    if ss.height:
        j = base.join(ss, on=["policy", "capacity_tokens"], suffix="_ss")
        for pol, grp in j.group_by("policy", maintain_order=True):
            w_all, w_ss = float(grp["ssd_bytes_written"].sum()), float(grp["ssd_bytes_written_ss"].sum())
            trade.append({"policy": pol[0], "written_ratio": w_ss / w_all if w_all else math.nan,
                          "mean_hit_change": float((grp["token_hit_rate_ss"] - grp["token_hit_rate"]).mean()),
                          "min_hit_change": float((grp["token_hit_rate_ss"] - grp["token_hit_rate"]).min()),
                          "max_hit_change": float((grp["token_hit_rate_ss"] - grp["token_hit_rate"]).max())})
    return {"wins": wins, "distance": dist.to_dicts(), "second_sighting": trade}
