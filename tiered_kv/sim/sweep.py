"""Parameter sweeps of the cluster model: a grid or a list of points, one task each, as Parquet.

A sweep is a TOML file (``tiered-kv sweep CONFIG.toml``) or a :class:`SweepConfig`. Its points
vary seven axes: ``policy`` (``lru``: capacity LRU; ``ttl``: per-class TTL, under the capacity
when one is given), ``capacity`` (the shared SSD pool, tokens or bytes, ``"inf"``), ``ttl``
(``"agent=3d,chatbot=7d"`` or a table), ``nodes``, ``routing``, ``preset`` (a synthetic
workload of :mod:`tiered_kv.sim.workload.synth`) and ``seed``; settings that do not vary
(``days``, ``bytes_per_token``, ``host_capacity``) sit at the top of the file::

    days = 14
    [grid]                       # every combination (``ttl`` only multiplies ttl points)
    policy = ["lru", "ttl"]
    capacity = ["2TiB", "8TiB"]
    ttl = ["agent=3d,chatbot=7d"]
    nodes = [1, 10]
    [[point]]                    # and/or single points; missing axes take the defaults
    policy = "lru"
    capacity = "inf"

Why one file per point: a point is the unit of work and of failure. The driver writes each
result row (axes, cluster and latency metrics, the point as JSON, the package version) to
``<out>/point-<id>.parquet``, named by a hash of the point, so a re-run skips what is there and
a changed point never reuses an old answer. Workers only compute; nothing needs a shared disk.

Where points run: one Ray task per point when Ray is installed (``pip install
tiered-kv[cluster]``; ``address=`` joins a cluster), else (or ``backend="pool"``) a local
process pool running the same function; only ``elapsed_s`` differs. Points are submitted
grouped by workload and each worker keeps its last workloads, so it rarely generates one twice.

Determinism: a row depends only on its point and the simulator's source, never on which worker
ran it or what it ran before.

* A kept workload is shared by its points, so its arrays are read-only (:func:`_read_only`): a
  replay that wrote into one raises (numba refuses to compile the store) instead of changing
  the points after it.
* Every row records ``code_digest``, a hash of the simulator source its worker imported
  (:func:`code_digest`). A checkout edited while a sweep runs gives rows of two codes; the
  sweep then stops naming the points instead of returning them mixed, and a resumed sweep
  recomputes every row whose digest is not the checkout's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from itertools import product
from pathlib import Path
from typing import Any

AXES = ("policy", "capacity", "ttl", "nodes", "routing", "preset", "seed")
SETTINGS = ("days", "bytes_per_token", "host_capacity", "out", "name")
POLICIES = ("lru", "ttl")
_MAX_NODES = 64
#: Result columns besides the axes: totals, then rates, then the latency model.
METRICS = ("requests", "input_tokens", "hit_tokens", "token_hit_rate", "disk_token_fraction",
           "window_hit_rate", "evictions_ssd", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "cost_per_mtok")


def _fail(key: str, value: Any, allowed: str, ok: bool = False) -> None:
    """Raise naming ``key``, its value and what is allowed, unless ``ok``."""
    if not ok:
        raise ValueError(f"{key}: {value!r} is out of range; allowed: {allowed}")


def _number(value: Any, kind: type = float) -> bool:
    return isinstance(value, (int, kind)) and not isinstance(value, bool)


def _int_in(key: str, value: Any, lo: int, hi: int | None = None) -> int:
    _fail(key, value, f"an integer in [{lo}, {hi}]" if hi is not None else f"an integer >= {lo}",
          ok=_number(value, int) and value >= lo and (hi is None or value <= hi))
    return int(value)


def _capacity(key: str, value: Any, bytes_per_token: float) -> float:
    """Tokens (math.inf for unlimited) from a token count, a byte size with a unit or "inf"."""
    from tiered_kv.sim.policies import capacity_tokens_from

    allowed = "a token count >= 1, a size with a unit (e.g. '8TiB', up to '100PiB' and beyond) or 'inf'"
    if isinstance(value, str) and value.strip().lower() in ("inf", "unlimited", "none"):
        return math.inf
    tokens = None
    if _number(value) or isinstance(value, str):
        with contextlib.suppress(ValueError):
            tokens = capacity_tokens_from(value, bytes_per_token=bytes_per_token, name=key)
    _fail(key, value, allowed, ok=tokens is not None and tokens >= 1)
    return float(tokens)


def _ttl(key: str, value: Any) -> tuple[tuple[str, float], ...]:
    """:func:`tiered_kv.units.parse_ttl` of ``value`` -> sorted pairs, each TTL > 0; a bare
    duration is stored under the class name ``"*"`` (the default TTL)."""
    from tiered_kv.units import TTL_FORM, parse_ttl

    per_class, default = parse_ttl(value, name=key)
    out = per_class if default is None else {**per_class, "*": default}
    _fail(key, value, f"{TTL_FORM}, or a table {{CLASS = DURATION}}; each TTL > 0", ok=all(s > 0 for s in out.values()))
    return tuple(sorted(out.items()))


@dataclass(frozen=True)
class SweepPoint:
    """One run of the cluster model: the seven axes plus the sweep's fixed settings."""

    policy: str = "lru"
    capacity: Any = "inf"  # as given: tokens, "8TiB" or "inf"
    ttl: Any = None  # as given; only for policy "ttl"
    nodes: int = 10
    routing: str = "cache-aware"
    preset: str = "mixed"
    seed: int = 0
    days: float = 14.0
    bytes_per_token: float = 70_272.0
    host_capacity: Any = "64GiB"  # per machine (window states)
    capacity_tokens: float = field(init=False)
    ttl_seconds: tuple[tuple[str, float], ...] | None = field(init=False)

    def __post_init__(self) -> None:
        from tiered_kv.sim.cluster import ROUTINGS
        from tiered_kv.sim.workload.synth import PRESETS
        from tiered_kv.units import parse_bytes

        _fail("policy", self.policy, f"one of {list(POLICIES)}", ok=self.policy in POLICIES)
        bpt = self.bytes_per_token
        _fail("bytes_per_token", bpt, "a number in [1, 1e8]", ok=_number(bpt) and 1 <= bpt <= 10**8)
        object.__setattr__(self, "capacity_tokens", _capacity("capacity", self.capacity, float(bpt)))
        if self.policy == "ttl":
            _fail("ttl", None, "a TTL for every policy 'ttl' point, e.g. 'agent=3d,chatbot=7d'", ok=self.ttl is not None)
            object.__setattr__(self, "ttl_seconds", _ttl("ttl", self.ttl))
        else:
            object.__setattr__(self, "ttl", None)  # a TTL means nothing to capacity LRU
            object.__setattr__(self, "ttl_seconds", None)
        _int_in("nodes", self.nodes, 1, _MAX_NODES)
        _fail("routing", self.routing, f"one of {list(ROUTINGS)}", ok=self.routing in ROUTINGS)
        _fail("preset", self.preset, f"one of {sorted(PRESETS)}", ok=self.preset in PRESETS)
        _int_in("seed", self.seed, 0)
        _fail("days", self.days, "a number of days in (0, 365]", ok=_number(self.days) and 0 < self.days <= 365)
        try:
            parse_bytes(self.host_capacity, name="host_capacity")
        except (ValueError, TypeError):
            _fail("host_capacity", self.host_capacity, "bytes >= 0, e.g. '64GiB' or 0")

    def as_dict(self) -> dict[str, Any]:
        """The point as plain JSON values (what the Parquet file's ``config`` column holds)."""
        d = asdict(self)
        d["ttl_seconds"] = None if self.ttl_seconds is None else dict(self.ttl_seconds)
        d["ttl"] = dict(self.ttl) if isinstance(self.ttl, Mapping) else self.ttl
        d["capacity_tokens"] = None if math.isinf(self.capacity_tokens) else self.capacity_tokens
        return d

    @property
    def point_id(self) -> str:
        """Hash of everything that decides the result (not of how it was spelled)."""
        d = self.as_dict()
        key = {k: d[k] for k in ("policy", "capacity_tokens", "ttl_seconds", "nodes", "routing", "preset", "seed",
                                 "days", "bytes_per_token")}
        from tiered_kv.units import parse_bytes

        key["host_capacity_bytes"] = parse_bytes(self.host_capacity, name="host_capacity")
        return hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=8).hexdigest()

    @property
    def label(self) -> str:
        """Policy and TTLs in words, e.g. ``ttl agent=3d chatbot=7d`` (the chart's colour)."""
        if self.ttl_seconds is None:
            return self.policy
        from tiered_kv.units import format_duration

        return "ttl " + " ".join(f"{c}={format_duration(s)}".replace(" ", "") for c, s in self.ttl_seconds)


@dataclass(frozen=True)
class SweepConfig:
    """The points of one sweep and where their results go."""

    points: tuple[SweepPoint, ...]
    out: Path | None = None
    name: str = "sweep"

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError("sweep: no points; give a [grid] table or [[point]] tables")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, base_dir: Path | None = None) -> SweepConfig:
        allowed_top = set(SETTINGS) | {"grid", "point"}
        for key in data:
            if key not in allowed_top:
                raise ValueError(f"sweep config: unknown key {key!r}; allowed: {sorted(allowed_top)}")
        settings = {k: data[k] for k in ("days", "bytes_per_token", "host_capacity") if k in data}
        points: list[SweepPoint] = []
        grid = data.get("grid")
        if grid is not None:
            if not isinstance(grid, Mapping):
                raise ValueError("grid: must be a table of lists, e.g. [grid] policy = [\"lru\", \"ttl\"]")
            for key, values in grid.items():
                if key not in AXES:
                    raise ValueError(f"grid: unknown key {key!r}; allowed: {list(AXES)}")
                if not isinstance(values, list) or not values:
                    raise ValueError(f"grid.{key}: must be a non-empty list, got {values!r}")
            keys = list(grid)
            for combo in product(*(grid[k] for k in keys)):
                points.append(SweepPoint(**dict(zip(keys, combo, strict=True)), **settings))
        raw_points = data.get("point", [])
        if not isinstance(raw_points, list):
            raise ValueError("point: must be an array of tables ([[point]])")
        for i, p in enumerate(raw_points):
            for key in p:
                if key not in AXES:
                    raise ValueError(f"point[{i}]: unknown key {key!r}; allowed: {list(AXES)}")
            points.append(SweepPoint(**{**settings, **p}))
        unique = list({p.point_id: p for p in points}.values())  # ttl is dropped for lru: dedupe
        out = data.get("out")
        if out is not None:
            out = Path(out)
            if base_dir is not None and not out.is_absolute():
                out = base_dir / out
        return cls(points=tuple(unique), out=out, name=str(data.get("name", "sweep")))

    @classmethod
    def from_toml(cls, path: str | Path) -> SweepConfig:
        import tomllib  # Python 3.11+

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"sweep config {path}: no such file")
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"sweep config {path}: not valid TOML ({exc})") from None
        cfg = cls.from_dict(data, base_dir=path.parent)
        name = str(data.get("name", path.stem))
        return replace(cfg, out=cfg.out or path.parent / path.stem, name=name)


# --- one point -------------------------------------------------------------------------------

#: The source a row depends on, relative to the package: the sweep, the replay engine, the
#: cluster and latency models, the policies, the workload generator, the trace schema, units.
#: Whole folders, so a new module there is covered without editing this list.
CODE_PATHS = ("sim/sweep.py", "sim/trace_replay.py", "sim/cluster", "sim/policies", "sim/workload", "sim/traces",
              "units.py")


def code_digest(root: str | Path | None = None) -> str:
    """Hash of the ``.py`` files of :data:`CODE_PATHS` under ``root`` (default: the installed
    package), by relative path and bytes."""
    root = Path(root) if root is not None else Path(__file__).resolve().parent.parent
    files: list[Path] = []
    for rel in CODE_PATHS:
        path = root / rel
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    h = hashlib.blake2b(digest_size=8)
    for f in files:
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(f.read_bytes() if f.is_file() else b"<missing>")
        h.update(b"\0")
    return h.hexdigest()


@lru_cache(maxsize=1)
def _running_code() -> str:
    """The digest of the code this process runs, read at its first point (a process keeps the
    modules it imported, whatever happens to the files afterwards)."""
    return code_digest()


def _read_only(trace):
    """Mark every array of ``trace`` (fields and cached properties computed so far) read-only."""
    import numpy as np

    for value in vars(trace).values():
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
    return trace


@lru_cache(maxsize=2)
def _workload(preset: str, days: float, seed: int):
    """The compiled workload, shared by the points of one worker and read-only."""
    from tiered_kv.sim.trace_replay import compile_trace
    from tiered_kv.sim.workload.synth import generate

    trace = compile_trace(generate(preset, days, seed))
    _ = trace.token_cumsum  # a cached property every point reads: computed now, frozen with the rest
    return _read_only(trace)


def run_point(point: SweepPoint) -> dict[str, Any]:
    """The result row of one point (its axes, metrics, config JSON and the package version)."""
    import tiered_kv
    from tiered_kv.sim.cluster import ClusterConfig, cluster_run
    from tiered_kv.sim.policies import get_policy
    from tiered_kv.units import parse_bytes

    t0 = time.perf_counter()
    code = _running_code()
    trace = _workload(point.preset, float(point.days), point.seed)
    policy = None
    if point.policy == "ttl":
        ttl = dict(point.ttl_seconds)
        default = ttl.pop("*", math.inf)
        cap = None if math.isinf(point.capacity_tokens) else int(point.capacity_tokens)
        policy = get_policy("ttl", ttl_seconds=ttl, default_ttl_seconds=default, capacity_tokens=cap)
    cfg = ClusterConfig(nodes=point.nodes, routing=point.routing, ssd="shared",
                        ssd_capacity_tokens=point.capacity_tokens,
                        host_capacity_bytes=parse_bytes(point.host_capacity, name="host_capacity"),
                        kv_bytes_per_token=float(point.bytes_per_token), seed=point.seed)
    summary = cluster_run(trace, cfg, ssd_policy=policy, progress=False)[1]
    d = point.as_dict()
    row: dict[str, Any] = {
        "point_id": point.point_id, "policy": point.policy, "label": point.label,
        "capacity_tokens": d["capacity_tokens"],
        "capacity_bytes": None if d["capacity_tokens"] is None else d["capacity_tokens"] * float(point.bytes_per_token),
        "ttl": None if point.ttl_seconds is None else ",".join(f"{c}={s:g}s" for c, s in point.ttl_seconds),
        "nodes": point.nodes, "routing": point.routing, "preset": point.preset, "seed": point.seed,
        "days": float(point.days),
    }
    row.update({m: summary.get(m) for m in METRICS})
    for cls, s in sorted(summary["by_class"].items()):
        row[f"disk_token_fraction_{cls}"] = s["disk_token_fraction"]
    row["config"] = json.dumps(d, sort_keys=True)
    row["tiered_kv_version"] = tiered_kv.__version__
    row["code_digest"] = code
    _read_only(trace)  # cached properties this point computed: read-only for the next point too
    row["elapsed_s"] = time.perf_counter() - t0
    return row


# --- the results on disk -----------------------------------------------------------------------

def point_path(out: Path, point: SweepPoint) -> Path:
    return Path(out) / f"point-{point.point_id}.parquet"


def write_row(out: Path, point: SweepPoint, row: dict[str, Any]) -> Path:
    """One point's row as its own Parquet file, written to a temporary name and renamed in place."""
    import polars as pl

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = point_path(out, point)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pl.DataFrame([row], infer_schema_length=None).write_parquet(tmp)
    os.replace(tmp, path)
    return path


def row_code(path: Path) -> str | None:
    """The ``code_digest`` of a result file (None when it has none or cannot be read)."""
    import polars as pl

    try:
        value = pl.read_parquet(path, columns=["code_digest"])["code_digest"][0]
    except Exception:  # noqa: BLE001 - an old layout, a half-written file: not a usable row
        return None
    return None if value is None else str(value)


def load_results(out: str | Path, points: Iterable[SweepPoint] | None = None):
    """Every result row under ``out`` (or those of ``points``, in their order) as one frame."""
    import polars as pl

    out = Path(out)
    files = sorted(out.glob("point-*.parquet"))
    if points is not None:
        wanted = [point_path(out, p) for p in points]
        files = [f for f in wanted if f.exists()]
    if not files:
        raise FileNotFoundError(f"sweep results {out}: no point-*.parquet files (run the sweep first)")
    return pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")


# --- running many --------------------------------------------------------------------------------

def ray_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None


def run_sweep(config: SweepConfig | str | Path, *, out: str | Path | None = None, workers: int | None = None,
              backend: str = "auto", address: str | None = None, progress: bool = True):
    """Run every point of ``config`` not already under ``out``; return all its rows (a polars frame).

    ``backend``: ``"ray"``, ``"pool"`` (local processes) or ``"auto"`` (Ray when installed).
    ``workers``: processes (pool) or local Ray CPUs (default: every core); with ``address`` the
    cluster decides. Resume and the ``code_digest`` check: the module docstring.
    """
    if not isinstance(config, SweepConfig):
        config = SweepConfig.from_toml(config)
    out = Path(out) if out is not None else config.out
    if out is None:
        raise ValueError("out: give the results directory (out = ... in the config, or --out)")
    _fail("backend", backend, "'auto', 'ray' or 'pool'", ok=backend in ("auto", "ray", "pool"))
    if workers is not None:
        _int_in("workers", workers, 1, 1024)
    if backend == "auto":
        backend = "ray" if ray_available() or address else "pool"
    if backend == "ray" and not ray_available():
        raise ValueError("backend 'ray': Ray is not installed; pip install 'tiered-kv[cluster]' (or use the pool)")
    code = code_digest()  # the checkout now: what the workers about to start will import
    todo = [p for p in config.points if row_code(point_path(out, p)) != code]
    todo.sort(key=lambda p: (p.preset, p.days, p.seed))  # one workload per worker, mostly
    from tqdm.auto import tqdm

    other: list[str] = []
    with tqdm(total=len(config.points), initial=len(config.points) - len(todo), unit="point",
              desc=f"sweep ({backend})", disable=not progress, smoothing=0.1,
              bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} points [{elapsed}<{remaining}]") as bar:
        runs = (_run_ray if backend == "ray" else _run_pool)(todo, workers, address) if todo else ()
        for point, row in runs:
            write_row(out, point, row)
            if row.get("code_digest") != code:
                other.append(point.point_id)
            bar.update(1)
    if other:
        raise ValueError(f"sweep {out}: {len(other)} of {len(todo)} points were computed by other code than the "
                         f"checkout's (code_digest {code}; the source under tiered_kv/sim changed while the sweep "
                         f"ran, or a worker runs another install): points {', '.join(sorted(other))}; run the sweep "
                         "again to recompute them")
    return load_results(out, config.points)


def _run_pool(points: list[SweepPoint], workers: int | None, address: str | None):
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    if address:
        raise ValueError("address: only for backend 'ray' (the pool runs on this machine)")
    n = workers or os.cpu_count() or 1
    # spawn, not fork: polars and numba hold threads a fork would copy mid-flight
    with ProcessPoolExecutor(max_workers=min(n, len(points)), mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(run_point, p): p for p in points}
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                yield futures[f], f.result()


def _run_ray(points: list[SweepPoint], workers: int | None, address: str | None):
    import ray

    started = False
    if not ray.is_initialized():
        where = {"address": address} if address else {"num_cpus": workers or os.cpu_count() or 1}
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False, **where)
        started = True
    try:
        task = ray.remote(num_cpus=1)(run_point)
        refs = {task.remote(p): p for p in points}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                yield refs[ref], ray.get(ref)
    finally:
        if started:
            ray.shutdown()
