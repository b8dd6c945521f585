"""benchmarks/SUMMARY.md, the head of BENCHMARKS.md: one line per benchmark against its goal.

Each benchmark module declares its lines (``SUMMARY``, :class:`~tiered_kv.bench._pages.Row`):
the JSONs a line reads, its figure computed from them (medians; ratios per paired repeat) and
the goal. Goals are not measurements, so they are constants in the module that owns them, or
read from the JSON where the benchmark records its own. A JSON that is missing gives a line
saying so. The prose head carries no measured figure.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from tiered_kv.bench._pages import Row, brief, recorded, yes

#: The modules whose ``PAGES`` make the records, in the order of their lines (``SUMMARY``) in the table.
MODULES = ("kernels", "store", "sim", "ttft", "engine", "contention", "peers", "policies", "retention", "widgets",
           "synth", "cluster_model")

#: The DeepSeek-scale day is recorded by ``tiered-kv day replay --record`` (not a bench module).
DAY_REPLAY_S = 30 * 60.0
DAY_RSS_BYTES = 12 * 2**30

HEADER = """# tiered-kv benchmarks

Every figure below is computed from a benchmark's JSON in `benchmarks/results/`, next to the
command that produced it; the sections after the summary are the full records, one per area
(`benchmarks/results/*.md`, each rendered from the same JSON by its benchmark's module, with
medians and their spread; ratios against a baseline are taken per paired repeat, and their
median and range shown), all written by `tiered-kv bench record`. Machine: the project's
development machine ({cores} CPU cores as the store benchmark recorded them, no GPU). Some runs
were made on a quiet machine, some at idle priority beside a model training job or other
engineers' jobs: each section states the conditions of its own run. Absolute times are
pessimistic and vary between runs; the ratios are against baselines measured in the same run
and are what to read.
"""

GPU_PENDING = """
**GPU figures are pending.** No GPU was lent to the sessions that wrote these. On an H200,
`bash benchmarks/gpu_check.sh` runs the CUDA kernel tests and `tiered-kv bench kernels` and
writes one results file; its figures (target: FP4 quantize/dequantize >= {tbps} TB/s, about
{share:.0%} of the {peak:g} TB/s roofline) go here once `tiered-kv bench record kernels_gpu FILE`
has recorded it as `benchmarks/results/kernels_gpu.json`.
"""


def _day(d: dict) -> tuple[str, str]:
    rss = d["replay_peak_rss_bytes"]
    return (f"{d['input_tokens'] / 1e9:.0f} B input tokens, {d['generated']['accesses'] / 1e9:.2f} B block "
            f"accesses: replay {brief(d['replay_s'])}, peak RSS {rss / 2**30:.1f} GiB"), \
        yes(d["replay_s"] < DAY_REPLAY_S and rss < DAY_RSS_BYTES)


DAY = Row("a DeepSeek-scale day, sharded Parquet, replayed through LRU and per-class TTL", ("deepseek_day",),
          lambda *_: f"replay < {DAY_REPLAY_S / 60:g} min, < {DAY_RSS_BYTES / 2**30:g} GiB (issue 16)", _day)
DAY_COMMAND = ("tiered-kv day generate ROOT --workers 1; "
               "tiered-kv day replay ROOT --record benchmarks/results/deepseek_day.json")


def modules() -> list:
    """The modules of :data:`MODULES`, imported."""
    return [importlib.import_module(f"tiered_kv.bench.{name}") for name in MODULES]


def rows() -> list[tuple[Row, str]]:
    """Every line of the table with the command its first JSON falls back on."""
    out = []
    for module in modules():
        defaults = {p.name: p.command for p in module.PAGES}
        out += [(row, defaults.get(row.files[0], "")) for row in getattr(module, "SUMMARY", ())]
    return out + [(DAY, DAY_COMMAND)]


def header(results: Path) -> str:
    """The prose head: the machine as the store JSON recorded it; the GPU note while it is pending."""
    from tiered_kv.bench.kernels import GPU_TBPS_TARGET, PEAK_GBPS

    store_json = results / "store.json"
    cores = json.loads(store_json.read_text()).get("cpu_count", "?") if store_json.exists() else "?"
    head = HEADER.format(cores=cores)
    if not (results / "kernels_gpu.json").exists():
        peak = PEAK_GBPS["H200"] / 1e3
        head += GPU_PENDING.format(tbps=GPU_TBPS_TARGET, share=GPU_TBPS_TARGET / peak, peak=peak)
    return head


def _line(row: Row, default_command: str, results: Path) -> str:
    paths = [results / f"{stem}.json" for stem in row.files]
    missing = [p.name for p in paths if not p.exists()]
    if missing:  # a goal read from the JSON cannot be given without it
        try:
            target = row.target()
        except TypeError:
            target = "-"
        if row.pending:
            return f"| {row.area} | `{row.pending}` | pending (no result) | {target} | pending |"
        return f"| {row.area} | - | no result ({', '.join(missing)} missing) | {target} | - |"
    data = [json.loads(p.read_text()) for p in paths]
    measured, met = row.figure(*data)
    cmds = [recorded(data[0], default_command)[0]] + [recorded(d, "")[0] for d in data[1:]]
    cmd = " / ".join(f"`{c.strip()}`" for c in dict.fromkeys("; ".join(c for c in cmds if c).split("; ")))
    return f"| {row.area} | {cmd} | {measured} | {row.target(*data)} | {met} |"


def render(results: Path) -> str:
    """SUMMARY.md's text from the JSONs under ``results``."""
    lines = ["| area | command | measured | target | met? |", "|---|---|---|---|---|"]
    lines += [_line(row, command, results) for row, command in rows()]
    return header(results) + "\n## Summary against the targets in the issues\n\n" + "\n".join(lines) + "\n"
