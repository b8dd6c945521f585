"""A DeepSeek-scale day of synthetic traffic, written as a sharded Parquet dataset, never whole in memory.

DeepSeek reported 608 B input tokens in 24 hours; at 512-token blocks that is about 1.2 billion
block accesses, some 10 GB of block ids alone. The workload generator
(:mod:`tiered_kv.sim.workload.synth`) draws a whole trace in memory, so the day is drawn as
``parts`` independent sub-populations, each the calibrated two-class workload at ``1/parts`` of
the rate (:meth:`~tiered_kv.sim.workload.synth.SynthConfig.scaled` scales the shared-prefix
catalogue with the rate, so every prefix sees the rate it sees in the calibrated workload), from
seed ``SeedSequence``-derived per part. A part is about one Mooncake-rate workload (16 M accesses
a day, under 1 GiB to draw), so parts run in parallel processes.

What this changes against one giant draw: each part has its own system-prompt blocks and its own
prefix catalogue, so the day holds ``parts`` copies of each class's system prompt (``parts``
extra cold misses out of a billion accesses) and the popularity of shared prefixes is a mixture of
``parts`` Zipf catalogues instead of one Zipf over ``parts`` times the items (the head items are
``parts`` times less concentrated). Both are noted beside every result.

Layout (``root/``)::

    manifest.json                 what was generated: scale, parts, id ranges, classes, times
    parts/part-00012.json         one per finished part (a re-run skips those parts)
    hour=0007/part-00012.parquet  requests of part 12 in hour 7, sorted by time

Columns: ``timestamp_s`` (Float64, seconds from the start of the first day), ``input_length``
(Int32), ``class_code`` (UInt8, index into the manifest's classes), ``part`` (UInt16) and
``block_ids`` (List(UInt32): chained block ids local to the part; a reader adds the part's
``id_base`` from the manifest, so ids stay dense across the day: the replay indexes arrays by them).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tiered_kv.rusage import peak_rss_bytes
from tiered_kv.units import HOUR_S

DEEPSEEK_INPUT_TOKENS_PER_DAY = 608e9
#: About one Mooncake-rate workload per part: 16 M block accesses a day, < 1 GiB to draw.
DEFAULT_TOKENS_PER_PART = 8.0e9
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class DayConfig:
    """How much traffic, over how many days, in how many parts."""

    input_tokens_per_day: float = DEEPSEEK_INPUT_TOKENS_PER_DAY
    days: float = 1.0  # generated; the replay counts the last ``days - warmup_days``
    warmup_days: float = 0.0  # replayed to warm the cache, not counted
    seed: int = 0
    tokens_per_part: float = DEFAULT_TOKENS_PER_PART  # per day; sets the number of parts

    def __post_init__(self) -> None:
        checks = [
            ("input_tokens_per_day", 1e6 <= self.input_tokens_per_day <= 1e14, "[1e6, 1e14] tokens"),
            ("days", 0 < self.days <= 60, "(0, 60] days"),
            ("warmup_days", 0 <= self.warmup_days < self.days, "[0, days) days"),
            ("seed", isinstance(self.seed, int) and self.seed >= 0, "an integer >= 0"),
            ("tokens_per_part", 1e5 <= self.tokens_per_part <= 1e12, "[1e5, 1e12] tokens per day"),
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise ValueError(f"{name}: {getattr(self, name)!r} is out of range; allowed: {allowed}")

    @property
    def parts(self) -> int:
        return max(1, math.ceil(self.input_tokens_per_day / self.tokens_per_part))


def base_workload():
    """The calibrated two classes at the Mooncake rates (preset ``mixed`` is this at 1/16)."""
    from tiered_kv.sim.workload.synth import AGENT, CHATBOT, SynthConfig

    return SynthConfig(classes=(CHATBOT, AGENT))


def class_names() -> list[str]:
    """The manifest's classes: a part's ``class_code`` is an index into this list, so the two must
    be one list (sorted, so the codes do not depend on the order the classes are declared in)."""
    return sorted(c.name for c in base_workload().classes)


def tokens_per_day_at_unit_rate(seed: int = 0, pilot_scale: float = 1 / 32) -> float:
    """Input tokens of one day of :func:`base_workload` (measured on a small pilot draw)."""
    from tiered_kv.sim.workload.synth import generate

    df = generate(base_workload().scaled(pilot_scale), 1.0, 10_000 + seed)
    return float(df["input_length"].sum()) / pilot_scale


def _part_seed(seed: int, part: int) -> int:
    return int(np.random.SeedSequence([seed, part]).generate_state(1, np.uint32)[0])


def write_part(root: str | Path, part: int, factor: float, days: float, seed: int) -> dict[str, Any]:
    """Draw part ``part`` (the base workload at ``factor`` x its rate) and write its hourly files."""
    import polars as pl

    from tiered_kv.sim.workload.synth import generate

    t0, c0 = time.perf_counter(), time.process_time()
    root = Path(root)
    df = generate(base_workload().scaled(factor), days, _part_seed(seed, part))
    code = {n: i for i, n in enumerate(class_names())}
    n_ids = int(df["block_ids"].list.max().max()) + 1
    if n_ids >= 2**32:
        raise ValueError(f"part {part}: {n_ids:,} block ids do not fit UInt32; use more parts (tokens_per_part)")
    frame = df.select(
        pl.col("timestamp_s"),
        pl.col("input_length").cast(pl.Int32),
        pl.col("traffic_class").replace_strict(code, return_dtype=pl.UInt8).alias("class_code"),
        pl.lit(part, dtype=pl.UInt16).alias("part"),
        pl.col("block_ids").cast(pl.List(pl.UInt32)),
        (pl.col("timestamp_s") // HOUR_S).cast(pl.Int32).alias("_hour"),
    )
    files = 0
    for (hour,), chunk in frame.partition_by("_hour", as_dict=True, maintain_order=True).items():
        d = root / f"hour={hour:04d}"
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"part-{part:05d}.parquet"
        tmp = path.with_name(f".{path.name}.tmp")
        chunk.drop("_hour").write_parquet(tmp, compression="zstd", row_group_size=256 * 1024)
        os.replace(tmp, path)
        files += 1
    info = {"part": part, "factor": factor, "seed": _part_seed(seed, part), "n_ids": n_ids,
            "requests": df.height, "accesses": int(df["block_ids"].list.len().sum()),
            "input_tokens": int(df["input_length"].sum()), "files": files,
            "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
            "peak_rss_bytes": peak_rss_bytes()}
    (root / "parts").mkdir(exist_ok=True)
    _write_json(root / "parts" / f"part-{part:05d}.json", info)
    return info


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def generate_day(root: str | Path, config: DayConfig = DayConfig(), *, workers: int = 1,
                 progress: bool = True) -> dict[str, Any]:
    """Write the day under ``root`` (resuming: finished parts are kept) and return its manifest."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm.auto import tqdm

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # the pilot is at most 1/32 of the unit rate, and no larger than the day itself
    unit = tokens_per_day_at_unit_rate(config.seed, min(1 / 32, max(1 / 4000, config.input_tokens_per_day / 8e9)))
    factor = config.input_tokens_per_day / unit / config.parts  # per part
    done = {int(p.stem.split("-")[1]) for p in (root / "parts").glob("part-*.json")}
    todo = [k for k in range(config.parts) if k not in done]
    with tqdm(total=config.parts, initial=config.parts - len(todo), unit="part", desc="generate day",
              disable=not progress) as bar:
        if workers <= 1:
            for k in todo:
                write_part(root, k, factor, config.days, config.seed)
                bar.update(1)
        else:
            with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
                futures = [pool.submit(write_part, root, k, factor, config.days, config.seed) for k in todo]
                for f in as_completed(futures):
                    f.result()
                    bar.update(1)
    parts = [json.loads((root / "parts" / f"part-{k:05d}.json").read_text()) for k in range(config.parts)]
    id_base = np.concatenate([[0], np.cumsum([p["n_ids"] for p in parts])])
    for p, base in zip(parts, id_base[:-1], strict=True):
        p["id_base"] = int(base)
    import tiered_kv

    manifest = {
        "schema_version": SCHEMA_VERSION, "tiered_kv_version": tiered_kv.__version__,
        "config": asdict(config), "parts": parts, "classes": class_names(),
        "block_size": base_workload().block_size, "tokens_per_day_at_unit_rate": unit,
        "factor_per_part": factor, "n_ids": int(id_base[-1]),
        **{k: sum(p[k] for p in parts) for k in ("requests", "accesses", "input_tokens")},
        "hours": math.ceil(config.days * 24),
        "generation_s": time.perf_counter() - t0 if not done else None,
        "generation_workers": workers,
        "generation_peak_rss_bytes": max([peak_rss_bytes(), peak_rss_bytes(children=True)]
                                         + [p["peak_rss_bytes"] for p in parts]),
        "generation_part_s_sum": sum(p["seconds"] for p in parts),
    }
    _write_json(root / "manifest.json", manifest)
    return manifest


def read_manifest(root: str | Path) -> dict[str, Any]:
    path = Path(root) / "manifest.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; generate the day first (tiered-kv day generate {root})")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema_version {manifest.get('schema_version')!r}, this reader knows {SCHEMA_VERSION}")
    return manifest
