"""Simulator speed on the real Mooncake conversation trace.

- curves: the full LRU curve (100 capacities) plus the TTL curve (100 TTLs) in one pass each,
  against the baseline measured in the same run: one event replay per point (the same numba
  kernel the policies use), so the ratio is the gain of the one-pass method alone;
- Belady (MIN with bypass) at one capacity, next-use computation included;
- event replay throughput of one policy (LRU) in block accesses per second;
- scaling: the same measurements on 1x, 4x and 16x the trace, built by concatenating copies
  shifted in time (by the trace's span) and in block ids (so copies share nothing);
- the Belady curve at the same 100 capacities, one stack pass (``belady_curve_s``);
- CLI start-up: whole ``tiered-kv curves`` / ``simulate`` processes, warm and with an empty numba
  cache (``cli_warm_s``, ``cli_cold_s``; :mod:`tiered_kv.bench._cli_startup`);
- the cluster model (key ``cluster``): a 14-day two-class synthetic run through 10 machines with
  3 tiers (target: at least 10 million block accesses in 60 s or less), against the single-cache
  LRU replay of the same compiled trace, so ``slowdown_vs_single_lru`` says what routing and the
  GPU and host tiers cost on top.

Times are the median of ``--repeat`` runs after a warm-up call, with every run kept beside it
(``runs_s``: the spread); the numba JIT warm-up (compile or load from the on-disk cache) is
measured separately and reported, never inside a timing.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from tiered_kv.bench._pages import Page, Row, brief, clocked, met, ms, traced, yes
from tiered_kv.rusage import peak_rss_bytes

NAME = "sim"
HELP = "simulator speed: one-pass curves vs per-point replay, Belady, replay throughput, scaling"


#: Goals on the conversation trace: seconds at most, accesses per second at least.
TARGETS = {"curves_s": 1.0, "belady_one_capacity_s": 2.0, "lru_replay_accesses_per_s": 2e6}


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", default="conversation", help="trace path or shipped name (default: conversation)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per measurement (the median is reported, every run kept)")
    parser.add_argument("--scales", default="1,4,16", help="trace multiples for the scaling table (default 1,4,16)")
    parser.add_argument("--capacity", type=int, default=1_000_000, help="capacity in tokens for Belady and replay")
    parser.add_argument("--cluster-days", type=float, default=14.0, help="synthetic days for the cluster run")
    parser.add_argument("--cluster-preset", default="mixed", help="synth preset for the cluster run")
    parser.add_argument("--no-cluster", action="store_true", help="skip the cluster-model run (about a minute)")
    parser.add_argument("--cli-repeat", type=int, default=3,
                        help="whole-process runs per CLI start-up figure, median kept (0: skip them)")


def median_of(fn, repeat: int, runs: dict[str, list[float]], name: str) -> float:
    """Median seconds of ``repeat`` calls of ``fn``; every run is kept in ``runs[name]``."""
    runs[name] = [clocked(fn)[1] for _ in range(max(repeat, 1))]
    return float(np.median(runs[name]))


def concat_shifted(trace, copies: int):
    """``copies`` back-to-back copies of a compiled trace, shifted in time and in block ids."""
    from tiered_kv.sim.trace_replay import CompiledTrace, ReplayOptions

    if copies == 1:
        return trace
    span = float(np.ptp(trace.timestamps)) + 1.0
    n, m, u = trace.n_requests, trace.n_accesses, trace.n_unique
    rep = lambda a: np.tile(a, copies)  # noqa: E731
    shift_req = np.repeat(np.arange(copies), n)
    shift_acc = np.repeat(np.arange(copies), m)
    offsets = np.zeros(n * copies + 1, dtype=np.int64)
    np.cumsum(rep(np.diff(trace.offsets)), out=offsets[1:])
    keys = (rep(trace.block_keys) + np.repeat(np.arange(copies, dtype=np.uint64), u) * np.uint64(2**40)).astype(np.uint64)
    t = CompiledTrace(
        request_id=rep(trace.request_id) + shift_req * n, timestamps=rep(trace.timestamps) + shift_req * span,
        input_length=rep(trace.input_length), block_size=rep(trace.block_size),
        class_codes=rep(trace.class_codes), class_names=trace.class_names, offsets=offsets,
        blocks=(rep(trace.blocks) + shift_acc * u).astype(np.int32), depth=rep(trace.depth),
        tokens=rep(trace.tokens), chunk_tokens=rep(trace.chunk_tokens), block_keys=keys,
        counted=np.ones(n * copies, dtype=bool))
    return t.with_options(ReplayOptions())


def measure(trace, capacity: int, repeat: int, baseline: bool) -> dict[str, Any]:
    from tiered_kv.sim import curves as C
    from tiered_kv.sim.policies import LRU, TTL, Belady

    caps = C.default_capacities(trace, 100)
    ttls = C.default_ttls(trace, 100)

    def curves():
        C.lru_curve(trace, caps)
        C.ttl_curve(trace, ttls)

    runs: dict[str, list[float]] = {}
    out: dict[str, Any] = {
        "requests": trace.n_requests, "block_accesses": trace.n_accesses, "unique_blocks": trace.n_unique,
        "lru_capacities": int(len(caps)), "ttl_points": int(len(ttls)),
        "curves_s": median_of(curves, repeat, runs, "curves_s"),
    }
    if baseline:
        def per_point():
            for c in caps:
                LRU(capacity_tokens=int(c)).run(trace)
            for t in ttls:
                TTL(default_ttl_seconds=float(t)).run(trace)
        out["per_point_replay_s"] = median_of(per_point, 1, runs, "per_point_replay_s")
        out["curves_speedup_vs_per_point"] = out["per_point_replay_s"] / out["curves_s"]
    out["belady_one_capacity_s"] = median_of(lambda: Belady(capacity_tokens=capacity).run(trace), repeat, runs,
                                             "belady_one_capacity_s")
    out["belady_curve_s"] = median_of(lambda: C.belady_curve(trace, caps), repeat, runs, "belady_curve_s")
    out["lru_replay_s"] = median_of(lambda: LRU(capacity_tokens=capacity).run(trace), repeat, runs, "lru_replay_s")
    out["lru_replay_accesses_per_s"] = trace.n_accesses / out["lru_replay_s"]
    out["runs_s"] = runs
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tqdm import tqdm

    from tiered_kv.sim import curves as C
    from tiered_kv.sim.policies import LRU, TTL, Belady
    from tiered_kv.sim.traces import load_trace, resolve_trace_path

    scales = [int(s) for s in str(args.scales).split(",") if s.strip()]
    if not scales or min(scales) < 1:
        raise ValueError("--scales: comma-separated multiples >= 1, e.g. 1,4,16")
    trace, load_s, compile_s = traced(lambda: load_trace(resolve_trace_path(args.trace)))

    def warm_up() -> None:  # first call of every kernel (compiles, or loads numba's on-disk cache)
        C.lru_curve(trace, [512])
        C.ttl_curve(trace, [1.0])
        LRU(capacity_tokens=512).run(trace)
        TTL(default_ttl_seconds=1.0).run(trace)
        Belady(capacity_tokens=512).run(trace)
        C.belady_curve(trace, [512])

    _, jit_s = clocked(warm_up)
    result: dict[str, Any] = {
        "trace": str(args.trace), "load_trace_s": load_s, "compile_trace_s": compile_s,
        "jit_warmup_s": jit_s, "capacity_tokens": args.capacity, "repeat": args.repeat,
        "targets": dict(TARGETS),
    }
    scaling = {}
    for s in tqdm(scales, desc="scales", unit="x", delay=2):
        scaling[f"{s}x"] = measure(concat_shifted(trace, s), args.capacity, args.repeat, baseline=(s == 1))
    result["conversation"] = scaling.get("1x") or next(iter(scaling.values()))
    result["scaling"] = {k: {f: v[f] for f in ("block_accesses", "curves_s", "belady_one_capacity_s", "belady_curve_s",
                                               "lru_replay_s", "lru_replay_accesses_per_s", "runs_s")}
                         for k, v in scaling.items()}
    base = result["conversation"]  # a time at most its target; a rate (per_s) at least
    result["meets_targets"] = {k: base[k] >= v if k.endswith("_per_s") else base[k] <= v for k, v in TARGETS.items()}
    if args.cli_repeat > 0:  # whole-process start-up of curves and simulate (tiered_kv/bench/_cli_startup.py)
        from tiered_kv.bench._cli_startup import run_cli_bench

        result.update(run_cli_bench(args.trace, args.cli_repeat))
        result["targets"].update(result["cli"]["targets"])
        result["meets_targets"].update(result["cli"]["meets_targets"])
    if not args.no_cluster:
        result["cluster"] = run_cluster_bench(args.cluster_days, args.cluster_preset)
    return result


def run_cluster_bench(days: float, preset: str) -> dict[str, Any]:
    """Generate, compile and replay the cluster workload; time each stage; report throughput and memory."""
    from tiered_kv.sim.cluster import V3_KV_BYTES_PER_TOKEN, ClusterConfig, simulate_cluster
    from tiered_kv.sim.policies import LRU
    from tiered_kv.sim.trace_replay import compile_trace
    from tiered_kv.sim.workload.synth import generate

    trace, gen_s, compile_s = traced(lambda: generate(preset, days, 0))
    cfg = ClusterConfig(nodes=10, routing="cache-aware", gpu_capacity_tokens=2_000_000,
                        host_capacity_bytes=int(200 * 1024 * V3_KV_BYTES_PER_TOKEN), ssd_capacity_tokens=2_000_000_000)
    # JIT warm-up on a small slice (compiles, or loads numba's on-disk cache)
    _, jit_s = clocked(lambda: simulate_cluster(compile_trace(generate("ci", 0.05, 0)), cfg))
    res, cluster_s = clocked(simulate_cluster, trace, cfg)
    _, single_s = clocked(lambda: LRU(capacity_tokens=cfg.ssd_capacity_tokens).run(trace))
    s = res.summary()
    return {
        "workload": f"synth {preset}, {days:g} days, seed 0",
        "requests": trace.n_requests, "block_accesses": trace.n_accesses, "unique_blocks": trace.n_unique,
        "config": {"nodes": cfg.nodes, "routing": cfg.routing, "gpu_capacity_tokens": cfg.gpu_capacity_tokens,
                   "host_capacity_bytes": cfg.host_capacity_bytes, "ssd_capacity_tokens": cfg.ssd_capacity_tokens},
        "generate_s": gen_s, "compile_trace_s": compile_s, "jit_warmup_s": jit_s,
        "cluster_s": cluster_s, "cluster_accesses_per_s": trace.n_accesses / cluster_s,
        "single_lru_s": single_s, "slowdown_vs_single_lru": cluster_s / single_s,
        "peak_rss_bytes": peak_rss_bytes(),
        "token_hit_rate": s["token_hit_rate"], "disk_token_fraction": s["disk_token_fraction"],
        "meets_target": {"block_accesses_ge_10M": trace.n_accesses >= 10_000_000, "cluster_s_le_60": cluster_s <= 60},
    }


# ------------------------------------------------------------------------------------ the record
COMMAND = "tiered-kv bench sim --json"
CLI_COMMAND = "tiered-kv bench sim --json --no-cluster --scales 1 --cli-repeat 5"
#: The 14-day cluster run's goal (the JSON's ``cluster.meets_target`` says whether it was met).
CLUSTER_TARGET = ">= 10 M accesses in <= 60 s"

RATIONALE = """## What was chosen and why
- **numba** (`cache=True`) for the sequential loops: the event replay (per-class LRU lists with
  exact TTL expiry and watermark eviction in one kernel), the Fenwick-tree stack distances and the
  Belady heap. Each decision depends on the state the previous one left, so numpy cannot
  vectorise them, and a plain Python loop over them is far slower.
- **One pass per curve**: a block is a leading hit iff the running maximum of its request's
  stack distances (LRU) or reuse times (TTL) is within the capacity or TTL, so a sorted array and
  a cumulative sum of token weights answer all points (proof in `tiered_kv/sim/curves.py`).
  The evaluation buckets each access under the first threshold it fits (binary search over the
  k points) and sums the buckets with one bincount: O(n log k) instead of sorting all n keys.
- **Belady**: a lazy-deletion heap (the shared min-heap, keys negated) on (next use, depth);
  blocks at their last use are only counted, never heaped (they are always the first to go, and
  which one goes cannot change a later hit).
- Per-class TTLs: one LRU list per class, ordered across lists by each block's last-touch access
  index, instead of an expiry heap, with the same expiry predicate as the brute-force replay
  (`now - last_touch > ttl`), so there are no float rounding differences between a heap and the
  lookup check.
"""


def _s(x: float) -> str:
    return f"{x:.3f} s" if x < 1 else f"{x:.2f} s"


def _runs(r: dict, name: str) -> str:
    runs = r.get("runs_s", {}).get(name)
    return f" ({', '.join(f'{x:.3f}' for x in runs)})" if runs and len(runs) > 1 else ""


def _conversation_rows(r: dict) -> list[str]:
    c, t, m = r["conversation"], r["targets"], r["meets_targets"]
    return [
        f"| LRU curve ({c['lru_capacities']} capacities) + TTL curve ({c['ttl_points']} TTLs), one pass each | "
        f"{_s(c['curves_s'])}{_runs(c, 'curves_s')} | <= {t['curves_s']:g} s | {met(m['curves_s'])} |",
        f"| the same {c['lru_capacities'] + c['ttl_points']} points as one event replay each (baseline, one run) | "
        f"{_s(c['per_point_replay_s'])} | | |",
        f"| one-pass speed-up over per-point replay (one baseline run over the median) | "
        f"{c['curves_speedup_vs_per_point']:.0f}x | | |",
        f"| Belady (MIN with bypass) at one capacity, next-use included | {_s(c['belady_one_capacity_s'])}"
        f"{_runs(c, 'belady_one_capacity_s')} | <= {t['belady_one_capacity_s']:g} s | {met(m['belady_one_capacity_s'])} |",
        f"| Belady curve at the same capacities, one stack pass | {_s(c['belady_curve_s'])}{_runs(c, 'belady_curve_s')} | | |",
        f"| LRU event replay throughput | {c['lru_replay_accesses_per_s'] / 1e6:.1f} M block accesses/s "
        f"({_s(c['lru_replay_s'])}{_runs(c, 'lru_replay_s')}) | >= {t['lru_replay_accesses_per_s'] / 1e6:g} M/s | "
        f"{met(m['lru_replay_accesses_per_s'])} |",
        f"| numba JIT warm-up (every kernel's first call; loads the on-disk cache when filled) | "
        f"{_s(r['jit_warmup_s'])} | reported, not timed | |",
        f"| trace load (polars JSONL) / compile to flat arrays | {_s(r['load_trace_s'])} / {_s(r['compile_trace_s'])} | | |",
    ]


def _cluster_lines(cl: dict) -> list[str]:
    cfg, ok = cl["config"], cl["meets_target"]
    return [
        "", "## Cluster model: a 14-day two-class run (`cluster` key)", "",
        f"{cl['workload']}: {cl['requests']:,} requests, {cl['block_accesses']:,} block accesses "
        f"({cl['unique_blocks']:,} distinct) through {cfg['nodes']} machines ({cfg['routing']} routing) with "
        f"GPU, host and SSD tiers. Generate {_s(cl['generate_s'])}, compile {_s(cl['compile_trace_s'])}, "
        f"JIT warm-up {_s(cl['jit_warmup_s'])}; the cluster replay **{_s(cl['cluster_s'])}** "
        f"({cl['cluster_accesses_per_s'] / 1e6:.1f} M accesses/s; target {CLUSTER_TARGET}: "
        f"{met(ok['block_accesses_ge_10M'] and ok['cluster_s_le_60'])}), {cl['slowdown_vs_single_lru']:.1f}x one "
        f"single-cache LRU replay of the same trace ({_s(cl['single_lru_s'])}, the baseline in the same run, one "
        f"run each); peak RSS {cl['peak_rss_bytes'] / 2**30:.2f} GiB; token hit rate {cl['token_hit_rate']:.1%}, "
        f"{cl['disk_token_fraction']:.1%} of input tokens from the SSD tier."]


def render_record(r: dict) -> str:
    """The simulator page's body from the JSON of one ``tiered-kv bench sim --json`` run."""
    c = r["conversation"]
    lines = [
        f"Trace `{r['trace']}`, Belady and replay at {r['capacity_tokens']:,} tokens, median of {r['repeat']} "
        "timed runs after a warm-up call; every run in brackets, seconds.", "",
        f"## Conversation trace ({c['requests']:,} requests, {c['block_accesses']:,} block accesses, "
        f"{c['unique_blocks']:,} distinct blocks)", "",
        "| measurement | result | target | met? |", "|---|---|---|---|", *_conversation_rows(r), "",
        "## Scaling (copies of the trace shifted in time and in block ids, so they share nothing)", "",
        "| trace | block accesses | LRU+TTL curves | Belady, one capacity | Belady curve | LRU replay | replay throughput |",
        "|---|---:|---:|---:|---:|---:|---:|"]
    for k, v in r["scaling"].items():
        lines.append(f"| {k} | {v['block_accesses']:,} | {_s(v['curves_s'])} | {_s(v['belady_one_capacity_s'])} | "
                     f"{_s(v['belady_curve_s'])} | {_s(v['lru_replay_s'])} | {v['lru_replay_accesses_per_s'] / 1e6:.1f} M/s |")
    if "cluster" in r:
        lines += _cluster_lines(r["cluster"])
    if "cli" in r:
        cli = r["cli"]
        lines += ["", f"CLI start-up in the same run (whole processes, median of {cli['repeat']}): `curves` "
                  f"{_s(cli['curves']['warm_s'])} warm / {_s(cli['curves']['cold_s'])} cold, `simulate` "
                  f"{_s(cli['simulate']['warm_s'])} / {_s(cli['simulate']['cold_s'])} (the quiet record with every "
                  "run is the CLI start-up section, `tiered-kv bench record sim_cli`)."]
    return "\n".join(lines) + "\n\n" + RATIONALE.rstrip("\n")


def _cli_runs(xs: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in xs)


def _cli_cell(d: dict, key: str) -> str:
    return f"{d[key + '_s']:.2f} s ({_cli_runs(d[key + '_runs_s'])})" if key + "_s" in d else "-"


def render_cli(r: dict) -> str:
    """The CLI start-up page's body from the JSON of ``tiered-kv bench sim --json --cli-repeat N``."""
    cli, conv = r["cli"], r["conversation"]
    targets, meets = cli["targets"], cli["meets_targets"]
    rows = "\n".join(f"| `{cli['commands'][n]}` | {_cli_cell(cli[n], 'warm')} | {_cli_cell(cli[n], 'cold')} |"
                     for n in ("curves", "simulate"))
    load = cli.get("load_average_1m")
    return f"""Whole processes, output discarded, median of {cli['repeat']} interleaved runs (every run in
brackets). *Warm*: numba's cache holds every kernel and the compiled-trace cache holds the trace
(both filled by one unmeasured run). *Cold*: a fresh empty `NUMBA_CACHE_DIR` and trace cache for
every run, so the trace is read from its file and every kernel the command needs is compiled by
numba. Machine load (1-minute load average) when the
run ended: {f"{load:.1f}" if load is not None else "not available"}.

| command | warm | cold |
|---|---:|---:|
{rows}

| figure | measured | target | met? |
|---|---:|---:|---|
| `cli_warm_s` (slower command, warm) | {_s2(r['cli_warm_s'])} | <= {_s2(targets['cli_warm_s'])} | {met(meets['cli_warm_s'])} |
| `cli_cold_s` (slower command, cold) | {_s2(r['cli_cold_s'])} | <= {_s2(targets['cli_cold_s'])} | {met(meets['cli_cold_s'])} |
| baseline: a process that only imports numpy (`numpy_imports_s`) | {_s2(cli['numpy_imports_s'])} \
({_cli_runs(cli['numpy_imports_runs_s'])}) | | |
| baseline: a process that only imports numpy and numba (`imports_s`) | {_s2(cli['imports_s'])} ({_cli_runs(cli['imports_runs_s'])}) | | |

The work itself, in the same run (median of {r['repeat']} after a warm-up call, conversation trace):
LRU + TTL curves at {conv['lru_capacities']} + {conv['ttl_points']} points {ms(conv['curves_s'])}; the Belady curve at
the same {conv['lru_capacities']} capacities in one stack pass {ms(conv['belady_curve_s'])} (one Belady replay at one
capacity: {ms(conv['belady_one_capacity_s'])}); one LRU replay {ms(conv['lru_replay_s'])}. Trace load
{ms(r['load_trace_s'])}, compile {ms(r['compile_trace_s'])}; first kernel calls (warm-up) in that process {ms(r['jit_warmup_s'])}."""


def _s2(x: float) -> str:
    return f"{x:.2f} s"


def _summary(d: dict) -> tuple[str, str]:
    c, cl = d["conversation"], d["cluster"]
    m = (f"LRU+TTL curves {brief(c['curves_s'])}; Belady one capacity {brief(c['belady_one_capacity_s'])}; "
         f"LRU replay {c['lru_replay_accesses_per_s'] / 1e6:.1f} M accesses/s; 14-day cluster "
         f"({cl['block_accesses'] / 1e6:.1f} M accesses) {brief(cl['cluster_s'])}")
    keys = ("curves_s", "belady_one_capacity_s", "lru_replay_accesses_per_s")
    met = [yes(d["meets_targets"][k]) for k in keys] + [yes(all(cl["meets_target"].values()))]
    return m, "; ".join(met)


def _summary_cli(d: dict) -> tuple[str, str]:
    """Warm and cold (empty numba cache) start of the slower command."""
    return (f"warm {brief(d['cli_warm_s'])}, cold {brief(d['cli_cold_s'])} (numba compiles every kernel); "
            "slower command, medians",
            f"warm {yes(d['meets_targets']['cli_warm_s'])}; cold {yes(d['meets_targets']['cli_cold_s'])}")


PAGES = (
    Page("sim", render_record, COMMAND, title="Simulator benchmark (`tiered-kv bench sim`)"),
    Page("sim_cli", render_cli, CLI_COMMAND,
         title="CLI start-up of the simulator commands (`tiered-kv bench sim`: `cli_warm_s`, `cli_cold_s`)"),
)
SUMMARY = (
    Row("LRU + TTL curves, Belady at one capacity, replay throughput (conversation trace); 14-day cluster run",
        ("sim",), lambda d: (f"<= {d['targets']['curves_s']:g} s; <= {d['targets']['belady_one_capacity_s']:g} s; "
                             f">= {d['targets']['lru_replay_accesses_per_s'] / 1e6:g} M/s; {CLUSTER_TARGET} "
                             "(issues 5, 6)"), _summary),
    Row("CLI start-up, whole `curves` / `simulate` processes, warm and cold numba cache", ("sim_cli",),
        lambda d: f"<= {d['targets']['cli_warm_s']:g} s warm, <= {d['targets']['cli_cold_s']:g} s cold (issue 13)",
        _summary_cli),
)
