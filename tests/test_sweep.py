"""Parameter sweeps: the config (grid, list, errors naming key and range), the pool and Ray paths, resume, the chart."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
import tomllib

from tiered_kv.sim.sweep import SweepConfig, SweepPoint, load_results, point_path, run_point, run_sweep

ROOT = Path(__file__).resolve().parent.parent
TINY = {"days": 0.25, "grid": {"policy": ["lru", "ttl"], "capacity": ["200000", "inf"],
                               "ttl": ["agent=3d,chatbot=7d"], "nodes": [2], "preset": ["ci"]}}


def test_grid_expands_and_ttl_multiplies_only_ttl_points():
    cfg = SweepConfig.from_dict({"days": 1, "grid": {"policy": ["lru", "ttl"], "ttl": ["1h", "agent=3d,chatbot=7d"],
                                                     "nodes": [1, 4]}})
    labels = sorted((p.label, p.nodes) for p in cfg.points)
    assert len(cfg.points) == 6  # lru x 2 nodes + ttl x 2 TTLs x 2 nodes
    assert ("lru", 1) in labels and ("ttl agent=3d chatbot=7d", 4) in labels and ("ttl *=1h", 1) in labels


def test_points_list_and_defaults():
    cfg = SweepConfig.from_dict({"point": [{"policy": "lru", "capacity": "8TiB"}, {"policy": "ttl", "ttl": {"agent": "3d"}}]})
    assert [p.policy for p in cfg.points] == ["lru", "ttl"]
    assert cfg.points[0].capacity_tokens == pytest.approx(8 * 2**40 // 70_272)
    assert cfg.points[1].ttl_seconds == (("agent", 259_200.0),)
    assert cfg.points[0].point_id != cfg.points[1].point_id


@pytest.mark.parametrize("data, message", [
    ({"grid": {"polcy": ["lru"]}}, r"grid: unknown key 'polcy'; allowed: \['policy', 'capacity'"),
    ({"nodez": 3, "grid": {"nodes": [1]}}, r"unknown key 'nodez'; allowed:"),
    ({"point": [{"routng": "random"}]}, r"point\[0\]: unknown key 'routng'"),
    ({"grid": {"nodes": [1, 100]}}, r"nodes: 100 is out of range; allowed: an integer in \[1, 64\]"),
    ({"grid": {"seed": [-1]}}, r"seed: -1 is out of range; allowed: an integer >= 0"),
    ({"grid": {"capacity": ["-5"]}}, r"capacity: '-5' is out of range; allowed: a token count >= 1"),
    ({"grid": {"capacity": ["1e999"]}}, r"capacity: '1e999' is out of range; allowed: a token count >= 1"),
    ({"grid": {"policy": ["belady"]}}, r"policy: 'belady' is out of range; allowed: one of \['lru', 'ttl'\]"),
    ({"grid": {"policy": ["ttl"], "ttl": ["agent=soon"]}}, r"ttl agent: 'soon' is out of range; allowed: a duration"),
    ({"grid": {"policy": ["ttl"]}}, r"ttl: None is out of range"),
    ({"days": 400, "grid": {"nodes": [1]}}, r"days: 400 is out of range; allowed: a number of days in \(0, 365\]"),
    ({"grid": {"routing": ["nearest"]}}, r"routing: 'nearest' is out of range; allowed: one of"),
    ({"grid": {"preset": ["huge"]}}, r"preset: 'huge' is out of range; allowed: one of \['agent', 'chatbot', 'ci', 'mixed'\]"),
    ({"grid": {"nodes": []}}, r"grid.nodes: must be a non-empty list"),
])
def test_bad_config_names_the_key_and_the_allowed_range(data, message):
    with pytest.raises(ValueError, match=message):
        SweepConfig.from_dict(data)


def test_cli_reports_a_bad_config_in_one_line(tmp_path, capsys):
    from tiered_kv.cli import main

    path = tmp_path / "bad.toml"
    path.write_text("[grid]\nnodes = [0]\n")
    assert main(["sweep", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nodes: 0 is out of range; allowed: an integer in [1, 64]" in err


@pytest.fixture(scope="module")
def pool_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep-pool")
    cfg = SweepConfig.from_dict({**TINY, "out": str(out)})
    return cfg, out, run_sweep(cfg, backend="pool", workers=2, progress=False)


def test_pool_sweep_writes_one_file_per_point_with_config_and_version(pool_run):
    import tiered_kv

    cfg, out, df = pool_run
    assert len(df) == len(cfg.points) == 4 and len(list(out.glob("point-*.parquet"))) == 4
    assert set(df["tiered_kv_version"]) == {tiered_kv.__version__}
    for row in df.iter_rows(named=True):
        point = SweepPoint(**{k: v for k, v in json.loads(row["config"]).items()
                              if k not in ("capacity_tokens", "ttl_seconds")})
        assert point.point_id == row["point_id"]
        assert 0 <= row["token_hit_rate"] <= 1 and row["requests"] > 0
    # same workload and capacity: LRU and a TTL of days that never expires in 6 hours agree
    a = df.filter(pl.col("policy") == "lru").sort("capacity_tokens", nulls_last=True)["hit_tokens"]
    b = df.filter(pl.col("policy") == "ttl").sort("capacity_tokens", nulls_last=True)["hit_tokens"]
    assert a.to_list() == b.to_list()


def test_the_pool_gives_the_rows_of_one_process(pool_run):
    cfg, _, df = pool_run
    p = cfg.points[0]
    row = run_point(p)
    got = df.filter(pl.col("point_id") == p.point_id).drop("elapsed_s").to_dicts()[0]
    assert got == {k: v for k, v in row.items() if k != "elapsed_s"}


def test_resume_skips_points_already_done(pool_run, tmp_path):
    import shutil

    cfg, out, _ = pool_run
    copy = tmp_path / "resume"
    shutil.copytree(out, copy)
    before = {f.name: f.stat().st_mtime_ns for f in copy.glob("point-*.parquet")}
    grown = SweepConfig.from_dict({**TINY, "grid": {**TINY["grid"], "nodes": [2, 3]}})
    df = run_sweep(grown, out=copy, backend="pool", workers=1, progress=False)
    assert len(df) == 8
    after = {f.name: f.stat().st_mtime_ns for f in copy.glob("point-*.parquet")}
    assert all(after[name] == t for name, t in before.items())  # untouched
    assert len(after) == 8


@pytest.fixture
def local_ray():
    """A local Ray of 2 CPUs; skipped when Ray (the optional 'cluster' extra) is absent or its
    node cannot start here (Ray's own start-up, e.g. its agents timing out on a loaded machine)."""
    ray = pytest.importorskip("ray", reason="Ray is the optional 'cluster' extra")
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    except Exception as exc:  # noqa: BLE001 - whatever Ray raises, the node did not start
        pytest.skip(f"Ray is installed but a local node did not start: {str(exc).splitlines()[0][:120]}")
    yield ray
    ray.shutdown()


def test_ray_path_gives_the_pool_rows(pool_run, tmp_path, local_ray):
    cfg, _, df = pool_run
    got = run_sweep(cfg, out=tmp_path, backend="ray", progress=False)  # joins the running local Ray
    assert local_ray.is_initialized()
    assert got.drop("elapsed_s").equals(df.drop("elapsed_s"))


def test_ray_backend_without_ray_says_how_to_install(monkeypatch, tmp_path):
    import tiered_kv.sim.sweep as sweep

    monkeypatch.setattr(sweep, "ray_available", lambda: False)
    cfg = SweepConfig.from_dict({**TINY, "out": str(tmp_path)})
    with pytest.raises(ValueError, match=r"tiered-kv\[cluster\]"):
        run_sweep(cfg, backend="ray", progress=False)


def test_plot_draws_a_facet_svg_from_the_parquet(pool_run, tmp_path):
    from tiered_kv.viz.sweep import plot, save_svg

    _, out, _ = pool_run
    grown = pl.concat([load_results(out), load_results(out).with_columns(pl.lit(5).cast(pl.Int64).alias("nodes"))])
    svg = save_svg(plot(grown, "token_hit_rate"), tmp_path / "s.svg").read_text()
    assert svg.startswith("<svg") and "machines" in svg and "unlimited" in svg
    with pytest.raises(ValueError, match="metric: 'nope'"):
        plot(grown, "nope")


def test_point_files_are_named_by_the_point():
    p = SweepPoint(policy="lru", capacity="1TiB")
    q = SweepPoint(policy="lru", capacity=int(2**40 // 70_272))  # the same capacity, spelled in tokens
    assert point_path(Path("x"), p) == point_path(Path("x"), q)


def test_cluster_extra_is_in_pyproject_and_environment_yml():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(r.startswith("ray") for r in extras["cluster"])
    env = (ROOT / "environment.yml").read_text()
    block = env.split("optional extra `cluster`", 1)[1].split("\n\n", 1)[0]
    listed = [m.group(1).strip() for m in re.finditer(r"#\s+- (.+)", block)]
    assert sorted(listed) == sorted(extras["cluster"]), "environment.yml's cluster block drifted from pyproject"
