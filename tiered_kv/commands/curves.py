"""Hit-rate curves of a trace: LRU at every capacity and TTL at every TTL in one pass each,
Belady (the offline optimum, an upper bound for any policy) and the infinite-cache bound.

The LRU curve comes from stack distances and the TTL curve from reuse times, so 100 points cost
about as much as one replay; Belady is replayed once per capacity (a progress bar appears when
that takes more than two seconds). Capacities default to 100 log-spaced sizes from one block to
the trace's footprint, TTLs to 100 log-spaced values from 1 s to the trace's span.

With ``--policy NAME [NAME ...]`` it also charts those policies at every capacity: hit rate,
SSD bytes written, bytes written per hit byte and drive writes per day, under ``--admission``.
``lru`` (admit-all) and ``belady`` come from one pass; the others are replayed per capacity in a
pool of ``--workers`` processes with a progress bar.

Examples:
  tiered-kv curves --trace conversation
  tiered-kv curves --trace conversation --policy lru fifo s3fifo arc --points 20
  tiered-kv curves --trace conversation --policy lfu:aging_accesses=100000 --admission second-sighting
  tiered-kv curves --trace data/traces/mooncake/conversation_trace.jsonl --json
  tiered-kv curves --trace conversation --semantics kvcache-ai --belady-points 20
"""

from __future__ import annotations

import argparse
from typing import Any

NAME = "curves"
HELP = ("LRU, TTL, Belady and infinite-cache hit-rate curves of a trace (one pass each); "
        "--policy NAME ...: any policy's hit rate and SSD writes at every capacity")
#: run() leaves nothing to flush or close, so the process may skip teardown (tiered_kv.cli.main).
FAST_EXIT = True


def register(parser: argparse.ArgumentParser) -> None:
    from tiered_kv import cli_args as _args
    from tiered_kv.commands._common import add_trace_arguments

    add_trace_arguments(parser)
    parser.add_argument("--points", type=_args.int_at_least(2, "capacities"), default=100,
                        help="number of capacities, >= 2 (default 100)")
    parser.add_argument("--ttl-points", type=_args.int_at_least(2, "TTLs"), default=100,
                        help="number of TTLs, >= 2 (default 100)")
    parser.add_argument("--capacity", action="append", default=None, metavar="TOKENS|BYTES", type=_args.capacity(),
                        help="explicit capacities instead of the log grid (repeatable; tokens or bytes)")
    parser.add_argument("--belady-points", type=_args.int_at_least(0, "capacities"), default=None, metavar="K",
                        help="replay Belady at K of the capacities, evenly spread (default: all; 0: none)")
    parser.add_argument("--fifo-trie", action="store_true",
                        help="also kvcache.ai's FIFO over prefix-trie nodes at every capacity (always on "
                             "with --semantics kvcache-ai, as `tiered-kv bench peers` runs it)")
    parser.add_argument("--policy", nargs="+", default=None, metavar="NAME",
                        help="also these policies at every capacity: registered names, path.py:Class "
                             "plug-ins, name:key=value parameters (docs/policies.md)")
    parser.add_argument("--admission", default="all", choices=["all", "second-sighting"],
                        help="admission filter of the --policy replays (default all)")
    parser.add_argument("--workers", type=_args.int_at_least(1, "worker processes"), default=2,
                        help="processes for the per-capacity --policy replays (default 2)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def _pick(n: int, k: int | None) -> list[int]:
    if k is None or k >= n:
        return list(range(n))
    if k <= 0:
        return []
    return sorted({round(i * (n - 1) / max(k - 1, 1)) for i in range(k)})


def _rates(hits, inp: int) -> list[float | None]:
    """Token hit rates of integer hit counts (None where not computed; 0 on a trace with no counted input)."""
    return [None if h is None else (int(h) / inp if inp else 0.0) for h in hits]


def compute_curves(trace, sem, capacities, ttls, belady_idx: list[int], progress: bool = True,
                   fifo_trie: bool = False) -> dict[str, Any]:
    """Every curve of the JSON output for a compiled trace (field names: docs/semantics.md).

    Under kvcache.ai's semantics LRU and Belady run over the prefix trie (totals only, no
    per-class rates); the trie is built once for them and the FIFO-trie curve of ``bench peers``
    (also drawn with ``fifo_trie``).
    """
    import numpy as np

    from tiered_kv.sim import curves as C
    from tiered_kv.sim.policies.belady import next_use

    caps = np.asarray(capacities, dtype=np.float64)
    bs = trace.uniform_block_size
    blocks = (caps // bs).astype(np.int64)
    inp = int(trace.input_length[trace.counted].sum())
    keys = C.lru_keys(trace)
    infinite = C.infinite_bound(trace, keys)
    nxt = next_use(trace)  # shared by the TTL keys and Belady
    ttl = C.ttl_curve(trace, ttls, nxt=nxt)
    on_trie = sem.lru_policy == "lru-trie"
    trie = None
    if on_trie or fifo_trie:
        from tiered_kv.sim.peers.trie import from_compiled

        trie = from_compiled(trace)
    by_class: dict[str, dict] = {}
    if on_trie:
        from tiered_kv.sim.peers.trie_belady import optimal_trie_curve
        from tiered_kv.sim.peers.trie_lru import lru_trie_curve

        lru_hit = lru_trie_curve(trie, blocks)
        opt = optimal_trie_curve(trie, blocks[belady_idx]) if belady_idx else []
    else:
        lru = C.lru_curve(trace, caps, keys)
        lru_hit = lru.hit_tokens
        opt = C.belady_curve(trace, caps[belady_idx], progress=progress, nxt=nxt).hit_tokens if belady_idx else []
        by_class = {name: {"input_tokens": lru.by_class_input_tokens[name],
                           "lru_token_hit_rate": lru.class_rate(name).tolist(),
                           "ttl_token_hit_rate": ttl.class_rate(name).tolist(),
                           "infinite_token_hit_rate": float(infinite.class_rate(name)[0])}
                    for name in trace.class_names}
    belady_hits: list[int | None] = [None] * len(caps)
    for j, i in enumerate(belady_idx):
        belady_hits[i] = int(opt[j])
    fifo = {}
    if trie is not None:
        from tiered_kv.sim.peers.trie_fifo import fifo_trie_curve

        hits = fifo_trie_curve(trie, blocks)
        fifo = {"fifo_trie_hit_tokens": [int(h) for h in hits], "fifo_trie_token_hit_rate": _rates(hits, inp)}
    return {
        "requests": int(trace.counted.sum()), "input_tokens": inp, "block_size": bs,
        "capacity_tokens": [int(c) for c in caps],
        "lru_hit_tokens": [int(h) for h in lru_hit], "lru_token_hit_rate": _rates(lru_hit, inp),
        "belady_hit_tokens": belady_hits, "belady_token_hit_rate": _rates(belady_hits, inp), **fifo,
        "ttl_seconds": [float(t) for t in ttls], "ttl_token_hit_rate": ttl.token_hit_rate.tolist(),
        "infinite_token_hit_rate": float(infinite.token_hit_rate[0]), "by_class": by_class,
    }


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from tiered_kv.commands._common import load_compiled, to_json
    from tiered_kv.sim import curves as C
    from tiered_kv.sim.policies import capacity_tokens_from
    from tiered_kv.units import DEFAULT_BYTES_PER_TOKEN, format_bytes, format_duration

    trace, sem = load_compiled(args)
    if args.policy and sem.lru_policy == "lru-trie":
        raise ValueError("--policy: the policy zoo runs under --semantics tiered-kv (block level)")
    bpt = args.bytes_per_token or DEFAULT_BYTES_PER_TOKEN
    if args.capacity:
        caps = np.array(sorted(capacity_tokens_from(c, bytes_per_token=bpt, name="--capacity")
                               for c in args.capacity), dtype=np.int64)
    else:
        caps = C.default_capacities(trace, args.points)
    ttls = C.default_ttls(trace, args.ttl_points)
    out = compute_curves(trace, sem, caps, ttls, _pick(len(caps), args.belady_points), progress=not args.json,
                         fifo_trie=args.fifo_trie)
    out.update({"trace": str(args.trace), "semantics": sem.name, "bytes_per_token": bpt})
    if args.policy:
        out["admission"] = args.admission
        out["policies"] = C.policy_curves(trace, args.policy, caps, admission=args.admission, bytes_per_token=bpt,
                                          workers=args.workers, progress=not args.json)
    if args.json:
        print(to_json(out))
        return 0
    print(f"trace {args.trace} (semantics {sem.name}): {out['requests']:,} requests, "
          f"{out['input_tokens']:,} input tokens; infinite-cache hit rate {out['infinite_token_hit_rate']:.2%}")
    fifo = out.get("fifo_trie_token_hit_rate")
    print(f"\n{'capacity (tokens)':>18} {'bytes':>10} {'LRU':>8} {'Belady':>8}" + (f" {'FIFO-trie':>9}" if fifo else ""))
    for i in _pick(len(caps), 12):
        b = out["belady_token_hit_rate"][i]
        print(f"{out['capacity_tokens'][i]:>18,} {format_bytes(caps[i] * bpt):>10} "
              f"{out['lru_token_hit_rate'][i]:>8.2%} {'-' if b is None else f'{b:.2%}':>8}"
              + (f" {fifo[i]:>9.2%}" if fifo else ""))
    if args.policy:
        _policy_table(out, caps, bpt)
    print(f"\n{'TTL':>10} {'hit rate':>9}")  # unlimited capacity
    for i in _pick(len(ttls), 10):
        print(f"{format_duration(ttls[i]):>10} {out['ttl_token_hit_rate'][i]:>9.2%}")
    return 0


def _policy_table(out: dict, caps, bpt: float) -> None:
    """Hit rate and drive writes per day of every --policy at 12 of the capacities."""
    from tiered_kv.units import format_bytes

    pols = out["policies"]
    print(f"\n--policy curves (admission {out['admission']}): token hit rate / drive writes per day")
    width = max(14, *(len(s) + 2 for s in pols))
    print(f"{'capacity':>10}" + "".join(f"{s:>{width}}" for s in pols))
    for i in _pick(len(caps), 12):
        cells = []
        for d in pols.values():
            w = d["drive_writes_per_day"][i]
            cells.append(f"{d['token_hit_rate'][i]:.1%}" + ("" if w is None else f" / {w:.3g}"))
        print(f"{format_bytes(caps[i] * bpt):>10}" + "".join(f"{c:>{width}}" for c in cells))
    for s, d in pols.items():
        written = [w for w in d["ssd_bytes_written"] if w is not None]
        tail = f", up to {format_bytes(max(written))} written" if written else ""
        print(f"  {s}: {d['method']}" + (f" (as {d['replayed_as']})" if "replayed_as" in d else "") + tail)
