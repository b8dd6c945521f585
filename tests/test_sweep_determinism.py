"""A sweep row depends on its point and the code only: not on the worker, nor on what it ran before.

The workload a worker caches is shared by its points, so it is read-only; rows record the digest
of the simulator source they were computed with, so an edited checkout is told apart from
nondeterminism, resume recomputes rows of other code, and a sweep whose workers ran other code
stops instead of returning mixed rows.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import tiered_kv.sim.sweep as sweep
from tiered_kv.sim.sweep import (
    SweepConfig,
    SweepPoint,
    code_digest,
    point_path,
    run_point,
    run_sweep,
    write_row,
)

#: Small enough for seconds, big enough to evict: one day of the ci workload holds many more
#: distinct blocks than either shared pool (0.5 M and 2 M tokens), on 1 and 3 machines.
DAYS = 1.0
GRID = {"days": DAYS, "grid": {"policy": ["lru", "ttl"], "capacity": ["500000", "2000000"],
                               "ttl": ["agent=1h,chatbot=6h"], "nodes": [1, 3], "preset": ["ci"]}}


def _row(point: SweepPoint) -> dict:
    return {k: v for k, v in run_point(point).items() if k != "elapsed_s"}


def test_the_cached_workload_is_read_only_for_every_later_point():
    sweep._workload.cache_clear()
    point = SweepConfig.from_dict(GRID).points[0]
    run_point(point)  # computes the cached properties a point needs
    trace = sweep._workload("ci", DAYS, 0)
    arrays = {k: v for k, v in vars(trace).items() if isinstance(v, np.ndarray)}
    assert {f.name for f in dataclasses.fields(trace)} - {"class_names"} <= set(arrays)
    assert "token_cumsum" in arrays  # a cached property: frozen too
    for name, a in arrays.items():
        with pytest.raises(ValueError, match="read-only"):
            a[:1] = a[:1]  # an in-place write by a replay would have changed every later point
        assert not a.flags.writeable, name


def test_a_point_after_other_points_equals_the_point_alone():
    points = SweepConfig.from_dict(GRID).points
    target = next(p for p in points if p.policy == "lru" and p.nodes == 3 and p.capacity == "500000")
    sweep._workload.cache_clear()
    alone = _row(target)
    assert alone["evictions_ssd"] > 0
    sweep._workload.cache_clear()
    after = {p.point_id: _row(p) for p in [*reversed(points), target]}  # the target twice, last after all others
    assert after[target.point_id] == alone


def test_one_worker_and_two_workers_give_identical_rows(tmp_path):
    cfg = SweepConfig.from_dict(GRID)
    one = run_sweep(cfg, out=tmp_path / "w1", backend="pool", workers=1, progress=False)
    two = run_sweep(cfg, out=tmp_path / "w2", backend="pool", workers=2, progress=False)
    one, two = (df.drop("elapsed_s").sort("point_id") for df in (one, two))
    assert len(one) == 8 and sorted(set(one["nodes"])) == [1, 3]
    assert (one["evictions_ssd"] > 0).all()  # both pools evict, under both policies
    assert one["code_digest"].unique().to_list() == [code_digest()]
    diff = [c for c in one.columns if not one[c].equals(two[c])]
    assert one.equals(two), f"columns differing between 1 and 2 workers: {diff}"


def test_resume_recomputes_rows_of_other_code_only(tmp_path):
    cfg = SweepConfig.from_dict({**GRID, "grid": {**GRID["grid"], "policy": ["lru"], "capacity": ["500000"]}})
    out = tmp_path / "r"
    run_sweep(cfg, out=out, backend="pool", workers=1, progress=False)
    stale, kept = cfg.points
    row = pl.read_parquet(point_path(out, stale)).to_dicts()[0]
    write_row(out, stale, {**row, "code_digest": "0123456789abcdef", "hit_tokens": -1})
    kept_mtime = point_path(out, kept).stat().st_mtime_ns
    df = run_sweep(cfg, out=out, backend="pool", workers=1, progress=False)
    assert point_path(out, kept).stat().st_mtime_ns == kept_mtime  # same code: skipped
    got = df.filter(pl.col("point_id") == stale.point_id).to_dicts()[0]
    assert got["code_digest"] == code_digest() and got["hit_tokens"] == row["hit_tokens"]  # recomputed


def test_a_sweep_whose_workers_ran_other_code_raises_naming_the_points(tmp_path, monkeypatch):
    cfg = SweepConfig.from_dict({**GRID, "grid": {**GRID["grid"], "policy": ["lru"], "capacity": ["500000"]}})

    def edited_checkout(points, workers, address):  # a worker that imported the files after an edit
        for p in points:
            yield p, {**run_point(p), "code_digest": "fedcba9876543210"}

    monkeypatch.setattr(sweep, "_run_pool", edited_checkout)
    with pytest.raises(ValueError, match=r"2 of 2 points were computed by other code than the checkout's"):
        run_sweep(cfg, out=tmp_path, backend="pool", progress=False)


def test_code_digest_follows_the_simulator_source_only(tmp_path):
    root = Path(sweep.__file__).resolve().parent.parent
    copy = tmp_path / "tiered_kv"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert code_digest(copy) == code_digest()
    (copy / "viz" / "unrelated.py").write_text("x = 1\n")  # outside CODE_PATHS
    assert code_digest(copy) == code_digest()
    model = copy / "sim" / "cluster" / "model.py"
    model.write_text(model.read_text() + "\n# an edit\n")
    assert code_digest(copy) != code_digest()
