"""Tail latency under contention: restores and misses sharing one store link, measured and modelled.

The question (a reader of DeepSeek's account asked it): with cache restores mixed with misses
that write new blocks, and a fixed prompt-length distribution, when should admission control
recompute a prompt although its prefix is cached? This benchmark answers it on this machine
with the real engine and model, and sets the latency model's answer beside it; the measurement
itself is :mod:`tiered_kv.measure.contention` (figure 18 runs it too), this module its flags.

Scenario (:mod:`tiered_kv.sim.cluster.contention`): ``--requests`` prompts of lognormal length
(``--median-tokens``, ``--sigma``; drawn once from ``--seed``, so every run and every point
sees the same lengths), each ``blocks`` full blocks plus a ``--suffix``-token tail. A fraction
``--restore-fraction`` are restores: their blocks were written to the store beforehand (as by
another machine), so they read them, replay R tokens and compute the tail. The others are
misses: they compute everything and write their blocks. Arrivals are a seeded Poisson stream,
dealt round robin to ``--streams`` engines (threads, each with its own host tier), which share
one :class:`~tiered_kv.tiers.ssd.SSDTier` on a local directory, whose bandwidth is limited by
``SSDConfig(link_bandwidth=)`` (``--link shared``: one token bucket for reads and writes, as the latency
model's one queue) or ``read_bandwidth=``/``write_bandwidth=`` (``--link split``).

How a request runs (the structure of the queue model in
:mod:`tiered_kv.sim.cluster.shared_compute`): at arrival, its prefix lookup is issued at once (a
reader thread; the read waits its turn on the link); when it completes, the request joins its
engine's FIFO compute queue; the engine prefills it; its new blocks are written behind the first
token (a writer thread, through the link). TTFT = first token - arrival. Under an admission
policy (``--admission``), a restore may instead be recomputed whole: ``own`` recomputes when that
alone finishes sooner than queueing on the link; ``shared`` also counts that the streams share
this machine's cores and charges the delay its extra work puts on the other busy streams. Both
read the *measured* queue state at arrival: the link's debt from its token bucket, the requests
each engine still has to run and how long its running one has run, how many engines are busy.

Calibration, in the same run: a few requests of each class alone, at unlimited bandwidth, give
the compute model ``c + a*n + b*n^2`` (``c`` per prefill; fitted to the model's formulas for
misses and restores, used both by the admission estimates and by the model), the raw read speed
and the store's bytes per token. The default bandwidths are 1, 3 and 10 times the *break-even*
bandwidth (where reading a median restore's prefix alone takes as long as the compute it saves);
the loads are fractions of this process's compute capacity (``load * min(streams, CPUs) / mean
isolated compute`` requests per second).

Repeats: the whole grid runs ``--repeats`` rounds; in each round the (bandwidth, load) pairs run
in a shuffled order seeded by the round, each pair's policies back to back, so a drift of the
machine's load lines up with no setting and the policies of a pair can be compared repeat by
repeat (``summary.admission``: paired p99 ratios, median and spread). A point records the median
of each percentile over the repeats with its spread, and the pooled requests' percentiles with
90% order-statistic intervals (:mod:`tiered_kv.sim.cluster.tail_stats`).

The model beside it: every point also runs through the queue model with the same arrivals,
streams, lengths and policy, twice: ``model_shared`` puts the streams on ``min(streams, CPUs)``
shared cores (processor sharing: recomputes and every other prefill slow each other down, as
they do here and on one GPU), ``model`` gives each stream a machine of its own (the per-machine
latency model). ``compute_slowdown`` (measured compute over the isolated fit) says how much of
the machine the point actually had.
"""

from __future__ import annotations

import argparse
import math
from collections import Counter

from tiered_kv.bench._pages import Page, Row
from tiered_kv.measure import load_model
from tiered_kv.measure.contention import measure_contention
from tiered_kv.measure.contention.report import (
    CLASSES,
    DIRECTION,
    POLICY,
    effect_lines,
    model_lines,
    rate_label,
    setup,
)
from tiered_kv.measure.contention.settings import (
    ADMISSION,
    DEFAULT_LOADS,
    LINKS,
    PRESETS,
    check_settings,
    parse_bandwidth,
    scenario_from,
)
from tiered_kv.sim.cluster import contention as C

NAME = "contention"
HELP = ("p50/p99 TTFT of restores and misses sharing one store link at several bandwidths, loads, "
        "always loading beside admission policies, repeated; measured with the engine beside the queue model")


def register(parser: argparse.ArgumentParser) -> None:
    d = C.ContentionScenario()
    parser.add_argument("--streams", type=int, default=d.streams,
                        help=f"concurrent request streams (engines on threads), 1-{C.MAX_STREAMS}")
    parser.add_argument("--requests", type=int, default=d.requests, help="requests per point (>= 2)")
    parser.add_argument("--restore-fraction", type=float, default=d.restore_fraction,
                        help="share of requests whose prefix is cached (restores), in [0, 1]")
    parser.add_argument("--median-tokens", type=int, default=d.median_tokens, help="median prompt length (tokens)")
    parser.add_argument("--sigma", type=float, default=d.sigma, help="lognormal sigma of prompt lengths, in [0, 3]")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="longest prompt (default: the model's max_seq_len, at most 4096)")
    parser.add_argument("--block-size", type=int, default=d.block_size, help="SSD chunk size (tokens)")
    parser.add_argument("--suffix", type=int, default=d.suffix_tokens,
                        help="new tokens after a restore's cached blocks, in [1, block size - 1]")
    parser.add_argument("--bandwidths", nargs="+", default=None, metavar="RATE",
                        help="link bandwidth limits ('256KiB/s', bytes/s, or 'inf'); default: 1, 3 and 10 times "
                             "the break-even bandwidth measured in the run")
    parser.add_argument("--loads", type=float, nargs="+", default=list(DEFAULT_LOADS),
                        help="offered load, fraction of compute capacity (min(streams, CPUs) / mean isolated "
                             "compute), each in (0, 4]")
    parser.add_argument("--admission", choices=sorted(ADMISSION), default="all",
                        help="admission policies beside always loading: 'own' (recompute when that alone is "
                             "sooner), 'shared' (the same with the shared cores and the delay to other streams "
                             "counted), 'all' (both), 'off' (always load only)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="rounds of the whole grid, interleaved (medians and spread over them), 1-20")
    parser.add_argument("--link", choices=LINKS, default="shared",
                        help="shared: one bucket for reads and writes (the latency model's one queue); "
                             "split: a read and a write limit of the same rate")
    parser.add_argument("--model-preset", choices=PRESETS, default=None,
                        help="model: 'small' (default; the committed checkpoint data/checkpoints/small.pt) or "
                             "'tiny' (random weights, for quick runs)")
    parser.add_argument("--checkpoint", default=None, help="a checkpoint to load instead")
    parser.add_argument("--calibration", type=int, default=6,
                        help="isolated requests (half restores, half misses) timed for the compute fit, 2-64")
    parser.add_argument("--calibration-repeats", type=int, default=2, help="repeats of each (median), 1-10")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (shared by the streams), 1-64")
    parser.add_argument("--seed", type=int, default=d.seed, help="seed of lengths, classes, arrivals and tokens")
    parser.add_argument("--store-dir", default=None, help="where the temporary stores go (default: temp dir)")
    parser.add_argument("--raw", action="store_true", help="include every request of every point in the JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> dict:
    """The JSON of one run: the flags checked, the model loaded, then the measurement."""
    import torch

    check_settings(loads=args.loads, calibration=args.calibration, calibration_repeats=args.calibration_repeats,
                   threads=args.threads, repeats=args.repeats)
    bandwidths = None if args.bandwidths is None else [parse_bandwidth(b) for b in args.bandwidths]
    settings = dict(streams=args.streams, requests=args.requests, restore_fraction=args.restore_fraction,
                    median_tokens=args.median_tokens, sigma=args.sigma, block_size=args.block_size,
                    suffix_tokens=args.suffix, seed=args.seed)
    scenario_from(max_tokens=args.max_tokens or max(4096, args.median_tokens), **settings)  # errors before loading
    torch.set_num_threads(args.threads)
    model, source = load_model(args.model_preset, args.checkpoint)
    max_tokens = args.max_tokens if args.max_tokens is not None else min(model.cfg.max_seq_len, 4096)
    sc = scenario_from(max_tokens=max_tokens, **settings)
    return measure_contention(sc, model=model, model_source=source, bandwidths=bandwidths, loads=args.loads,
                              policies=ADMISSION[args.admission], link=args.link, calibration=args.calibration,
                              calibration_repeats=args.calibration_repeats, repeats=args.repeats,
                              progress=not args.no_progress,
                              store_dir=args.store_dir, raw=args.raw)


# ------------------------------------------------------------------------------------ the record
# The words the page shares with figure 18 (the setup, the models' fit, admission's effects) come
# from tiered_kv.measure.contention.report. The page lists where admission raised p99 as well as
# where it cut it.
COMMAND = "tiered-kv bench contention --json"


def _ms(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.0f}"


def _spread(d: dict, key: str, fmt=_ms) -> str:
    lo, hi = d.get(f"{key}_spread", [None, None])
    return f"{fmt(d.get(key))} ({fmt(lo)}-{fmt(hi)})"


def _ci(d: dict) -> str:
    lo, hi = d.get("p99_ms_ci90", [None, None])
    if lo is None and hi is None:
        return "-"
    if hi is None:
        return f"{_ms(lo)} to above the largest, {_ms(d.get('max_ms'))}"
    return f"{_ms(lo) if lo is not None else 'below the smallest'}-{_ms(hi)}"


def _where(p: dict) -> str:
    bw = p["bandwidth"]
    if p.get("bandwidth_over_break_even") is not None:
        bw += f" ({p['bandwidth_over_break_even']:.2g}x)"
    return f"| {bw} | {p['load']:g} ({p['rate_per_s']:.2g}/s) | {POLICY[p['policy']]} "


def _tail_rows(r: dict) -> list[str]:
    rows = []
    for p in r["points"]:
        for cls, _ in CLASSES:
            m, pooled, sh, own = p["measured"][cls], p["pooled"][cls], p["model_shared"][cls], p["model"][cls]
            if not m.get("count"):
                continue
            rec = (f"{_spread(m, 'recomputed_fraction', lambda x: f'{x:.0%}')} / {sh['recomputed_fraction']:.0%}"
                   if cls == "restore" else "-")
            rows.append(_where(p) + f"| {cls} ({m['count']}) | {_spread(m, 'p50_ms')} | {_spread(m, 'p99_ms')} "
                        f"| {_ms(pooled['p99_ms'])} ({_ci(pooled)}) | {_ms(sh['p99_ms'])} | {_ms(own['p99_ms'])} "
                        f"| {rec} |")
    return rows


def _machine_rows(r: dict) -> list[str]:
    rows = []
    for p in r["points"]:
        thr, limit = p["link_throughput_bytes_per_s"], p["bandwidth_bytes_per_s"]
        ok = thr is not None and not math.isnan(thr)
        share = f" ({thr / limit:.0%})" if limit and ok else ""
        agree = sorted(rep["decisions_agree"]["model_shared"] for rep in p["repeats"])
        rows.append(_where(p) + f"| {p['offered_link_utilisation']:.2f} | {rate_label(thr) if ok else '-'}{share} "
                    f"| {_spread(p, 'compute_slowdown', lambda x: f'{x:.2f}')} | {agree[len(agree) // 2]:.0%} "
                    f"| {p['dispatch_lateness_max_s'] * 1e3:,.0f} | {p['wall_s']:.1f} "
                    f"| {', '.join(str(k) for k in p['run_order'])} |")
    return rows


def summary_cells(c: dict) -> tuple[str, str]:
    """(figure, met?) of the summary row: the shared-cores model's p99 beside measured, and the
    directions admission moved restore p99."""
    m = c["summary"]["model_over_measured"]["model_shared"]
    text = (f"shared-cores model / measured p99 (median over points): restores x{m['restore']['p99']['median']:.2f}, "
            f"misses x{m['miss']['p99']['median']:.2f}; {c['repeats']} repeats")
    for pol in c.get("policies", []):
        if pol != "load":
            # how many (bandwidth, load) points each direction holds for this policy's restore p99
            t = Counter(row["restore"]["direction"] for row in c["summary"]["admission"] if row["policy"] == pol)
            text += f"; {POLICY[pol]}: restore p99 " + ", ".join(f"{DIRECTION[k]} at {v}" for k, v in sorted(t.items()))
    return text, "side by side, both directions shown (see section)"


def render_record(r: dict) -> str:
    """The body of the contention page from the JSON of one ``tiered-kv bench contention --json`` run."""
    la0, la1 = r["load_average_start"], r["load_average_end"]
    slow = sorted(p["compute_slowdown"] for p in r["points"])
    return f"""Load average (1/5/15 min) {la0[0]:.1f}/{la0[1]:.1f}/{la0[2]:.1f} at the start and
{la1[0]:.1f}/{la1[1]:.1f}/{la1[2]:.1f} at the end, {r['cpus']} CPU(s), {r['torch_threads']} torch thread(s);
the whole run took {r['wall_s']:.0f} s. Every point ran {r['repeats']} times, in interleaved rounds (each round
its own shuffled order, a pair's policies back to back). The points' compute ran at
{slow[0]:.2f}-{slow[-1]:.2f}x the calibration (median {slow[len(slow) // 2]:.2f}x; *compute slowdown* below).

{setup(r)}
Policies: *always load*; *admission, own TTFT* recomputes a restore when that alone finishes sooner
than queueing on the link; *admission, shared cores* also counts the sharing of the cores and
charges the delay its extra work puts on the other busy streams. Both read the measured queue
state at arrival (the link's token-bucket debt, each engine's unfinished requests, the busy engines).

TTFT in ms. Measured p50 and p99: the median over the repeats (min-max over them). Pooled p99:
every repeat's requests together, with its 90% order-statistic interval ("to above the
largest": too few requests to bound it from above; a p99 needs about 300). The models run the same arrivals, streams, lengths and
policy; "shared cores" puts the streams on the machine's cores (processor sharing),
"a machine each" is the per-machine latency model.

| link (x break-even) | load (rate) | policy | class (requests) | measured p50 | measured p99 | pooled p99 (90% interval) | model p99, shared cores | model p99, a machine each | restores recomputed (measured / shared-cores model) |
|---|---:|---|---|---:|---:|---:|---:|---:|---:|
{chr(10).join(_tail_rows(r))}

The link and the CPUs at each point: offered link utilisation (bytes the requests move / limit),
measured link throughput over the link's busy window (median over repeats, and its share of the
limit), measured compute over the isolated fit (median and range over repeats), the share of
requests whose admission decision the shared-cores model made the same way (median over
repeats), the dispatcher's worst lateness, the point's wall time over all repeats, and when its
repeats ran.

| link (x break-even) | load (rate) | policy | offered link utilisation | link throughput (of limit) | compute slowdown | same decisions | dispatch lateness (ms) | wall (s) | ran |
|---|---:|---|---:|---:|---:|---:|---:|---:|---:|
{chr(10).join(_machine_rows(r))}

Model over measured (measured: the median over repeats), median (range) over the points:
{chr(10).join(model_lines(r))}

What admission did to p99, against always loading at the same link and load, paired repeat by
repeat (the policies of a pair ran back to back): median ratio (range, pairs), beside the models'
ratios. "Nothing recomputed": the policy changed no decision there, so a ratio away from 1 is the
noise between runs, not the policy.
{chr(10).join(effect_lines(r)) or "- (no admission policy ran)"}"""


PAGES = (Page("contention", render_record, COMMAND,
              title="Tail latency under contention: restores and misses sharing one store link and the cores"),)
SUMMARY = (Row("p50/p99 TTFT of restores and misses sharing one store link and the cores, measured (repeats) "
               "beside the queue model; admission both ways", ("contention",),
               lambda *_: "measured and modelled side by side; admission's increases and cuts listed", summary_cells),)
