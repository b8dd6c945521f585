"""Side by side with the public simulators: identical hit tokens, and the wall-time ratio.

Runs kvcache.ai's ``kvcache-simulator`` (C++ backend, its fastest) for ``lru``, ``optimal``
and ``fifo``, and LMCache's cache simulator (``lru``), on the same trace and the same
capacities as tiered-kv under the matching ``--semantics`` preset, in this one process run.
For every peer and policy it reports the hit tokens from both sides, ``identical`` (every
point equal, not just the rate) and ``speedup_vs_peer``: the median over ``--repeat`` interleaved
rounds (peer, ours, peer, ours, ...) of peer wall time / tiered-kv wall time for the whole curve,
every round recorded (``peer_seconds_all``, ``ours_seconds_all``, and the CPU times).

What is timed: the peer from its own parsed input (kvcache.ai: ``run_cpp_sweep`` on its
``TraceData``, which writes its binary trace, builds its trie and runs one simulation per
capacity; LMCache: ``simulate(fast=True)`` once per capacity on its loaded events); tiered-kv
from the loaded trace frame (compile for the preset, build the trie, one-pass curve). One-off
costs are excluded on both sides and reported: compiling the peer's C++ binary, loading
tiered-kv's numba kernels. Capacities: ``--points`` log-spaced from ``--min-tokens`` to
``--max-tokens`` tokens, as whole blocks (kvcache.ai) or chunks (LMCache).

libCacheSim (``libcachesim`` on PyPI): for the nine policies both implement (LRU, FIFO, LFU,
ARC, SLRU, 2Q, S3-FIFO, SIEVE, Belady; :data:`tiered_kv.sim.peers.libcachesim.PAIRS`) the same
block-level trace (every block access one request for one unit-size object) at
``--libcachesim-points`` capacities in blocks, log-spaced over the same token range, compares
block hits (``identical``) and ``speedup_vs_peer`` as above over ``--libcachesim-repeat`` rounds.
The peer runs libCacheSim's C loop over its oracleGeneral file; ours runs the zoo kernel on the
compiled trace (each written or compiled once, not timed).

Installs nothing: a missing peer is reported (``available: false`` with the install command).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tiered_kv.bench._pages import Page, Paired, Row, clocked, every_run, sec, spread, yes
from tiered_kv.rusage import cpu_seconds

NAME = "peers"
PEERS = ("kvcache-simulator", "lmcache", "libcachesim")
HELP = "parity and speed against kvcache.ai's, LMCache's and libCacheSim's simulators (needs the peers extra)"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", default="conversation", help="trace path or shipped name (default: conversation)")
    parser.add_argument("--points", type=int, default=100, help="capacities on the curve (default 100)")
    parser.add_argument("--min-tokens", type=float, default=1e4, help="smallest capacity in tokens (default 1e4)")
    parser.add_argument("--max-tokens", type=float, default=1e8, help="largest capacity in tokens (default 1e8)")
    parser.add_argument("--policies", default="lru,optimal,fifo", help="kvcache.ai policies (default lru,optimal,fifo)")
    parser.add_argument("--skip", default="", help="peers to leave out: kvcache-simulator, lmcache, libcachesim")
    parser.add_argument("--libcachesim-points", type=int, default=20,
                        help="capacities of the libCacheSim comparisons (default 20)")
    parser.add_argument("--libcachesim-repeat", type=int, default=3,
                        help="interleaved timed rounds per side for libCacheSim, median kept (default 3)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="interleaved timed rounds per side for kvcache-simulator and LMCache, "
                             "median kept, every round recorded (default 1)")
    parser.add_argument("--lmcache-bytes-per-token", type=int, default=2,
                        help="bytes per token in the exported LMCache log (sets bytes per chunk; default 2)")


def _timed_compare(peer_fn, ours_fn, repeat: int, ours_policy: str) -> dict:
    """Both sides' curves compared point by point, and timed in ``repeat`` interleaved rounds as
    the module docstring says (load from other jobs on a shared machine hits both sides alike);
    the speed-ups are taken per round (:func:`speedups`)."""
    runs: dict[str, list[float]] = {f"{side}_{cpu}seconds_all": [] for cpu in ("", "cpu_") for side in ("peer", "ours")}
    out: dict[str, Any] = {}
    for _ in range(max(1, repeat)):
        for side, fn in (("peer", peer_fn), ("ours", ours_fn)):
            t0, c0 = time.perf_counter(), cpu_seconds(children=True)
            out[side] = fn()
            runs[f"{side}_seconds_all"].append(time.perf_counter() - t0)
            runs[f"{side}_cpu_seconds_all"].append(cpu_seconds(children=True) - c0)
    med = {key.removesuffix("_all"): statistics.median(v) for key, v in runs.items()}
    wall, cpu = speedups(runs)
    diff = np.flatnonzero(out["peer"] != out["ours"])
    return {"ours_policy": ours_policy, "identical": bool(diff.size == 0), "mismatches": int(diff.size),
            "first_mismatch_index": int(diff[0]) if diff.size else None, "peer_seconds": med["peer_seconds"],
            "ours_seconds": med["ours_seconds"], "speedup_vs_peer": wall.median,
            "peer_cpu_seconds": med["peer_cpu_seconds"], "ours_cpu_seconds": med["ours_cpu_seconds"],
            "cpu_speedup_vs_peer": cpu.median, "hit_tokens_peer": out["peer"].tolist(),
            "hit_tokens_ours": out["ours"].tolist(), "repeat": int(max(1, repeat)), **runs}


def _warm_numba() -> float:
    """Load (or compile) every kernel once on a tiny trace; reported, never timed in a curve."""
    from tiered_kv.sim import peers
    from tiered_kv.sim.traces import random_trace

    t0 = time.perf_counter()
    df = random_trace(0, 40)
    for pol in ("lru", "optimal", "fifo"):
        peers.ours_kvcache(df, [1, 3, 50], pol)
    peers.ours_lmcache(df, [1, 3])
    return time.perf_counter() - t0


def _kvcache(df, path, caps_blocks, policies, repeat, bar) -> dict:
    from tiered_kv.sim import peers

    status = peers.kvcache_status()
    out: dict[str, Any] = {"status": status.to_dict(), "semantics": "kvcache-ai"}
    if not status.available:
        return out
    from kvcache_sim.cpp_backend import ensure_cpp_simulator

    backend = "cpp" if "cpp" in status.detail else "python"
    out["backend"] = backend
    if backend == "cpp":
        out["peer_compile_seconds"] = clocked(ensure_cpp_simulator)[1]
    trace = peers.kvcache_trace(path, block_size=int(df["block_size"][0]))
    w = trace.request_starts[trace.request_count // 2]
    out["total_tokens"] = int(sum(trace.tokens[w:]))
    for pol in policies:
        bar.set_description(f"kvcache-simulator {pol} vs tiered-kv {peers.KVCACHE_POLICIES[pol]}")

        def peer_fn(p=pol):
            bar.update(1)
            return peers.run_kvcache(trace, caps_blocks, p, backend=backend)

        def ours_fn(p=pol):
            bar.update(1)
            return peers.ours_kvcache(df, caps_blocks, p)

        out[pol] = _timed_compare(peer_fn, ours_fn, repeat, peers.KVCACHE_POLICIES[pol])
    return out


def _lmcache(df, caps_chunks, repeat, bytes_per_token, bar) -> dict:
    from tiered_kv.sim import peers
    from tiered_kv.sim.peers.lmcache_io import write_lookup_jsonl

    status = peers.lmcache_status()
    out: dict[str, Any] = {"status": status.to_dict(), "semantics": "lmcache"}
    if not status.available:
        return out
    with tempfile.TemporaryDirectory(prefix="tiered-kv-peers-") as tmp:
        log = write_lookup_jsonl(df, Path(tmp) / "lookup_hashes_trace.jsonl", bytes_per_token=bytes_per_token)
        events = peers.lmcache_events(log)
    bpc = peers.lmcache_simulator().compute_kv_bytes_per_chunk(events[0])
    out["bytes_per_chunk"] = bpc
    out["total_tokens"] = int(sum(e["seq_len"] for e in events))

    def peer_curve():
        hits = []
        for c in caps_chunks:
            hits.append(int(peers.run_lmcache(events, [c], bpc)[0]))
            bar.update(1)
        return np.array(hits, dtype=np.int64)

    bar.set_description("lmcache lru vs tiered-kv lru (lmcache semantics)")
    out["lru"] = _timed_compare(peer_curve, lambda: peers.ours_lmcache(df, caps_chunks), repeat, "lru")
    return out


def _libcachesim(df, caps_blocks, repeat, bar) -> dict:
    from tiered_kv.sim.peers import libcachesim as L
    from tiered_kv.sim.trace_replay import compile_trace

    ok, detail = L.libcachesim_status()
    out: dict[str, Any] = {"status": {"available": ok, "detail": detail}, "semantics": "block level, unit-size objects"}
    if not ok:
        return out
    trace = compile_trace(df)
    caps = [int(c) for c in caps_blocks]
    out.update({"capacities_blocks": caps, "block_accesses": trace.n_accesses, "repeat": int(repeat),
                "timing": "median of interleaved rounds (peer, ours, ...), whole curve per round"})
    with tempfile.TemporaryDirectory(prefix="tiered-kv-lcs-") as tmp:
        path = L.write_oracle_trace(trace, Path(tmp) / "blocks.oracleGeneral.bin")
        for name, ours_name in L.PAIRS.items():
            bar.set_description(f"libcachesim {name} vs tiered-kv {ours_name}")
            L.ours_hits(trace, ours_name, caps[:1])  # load the kernel: one-off, not timed

            def peer_fn(n=name):
                bar.update(1)
                return np.asarray(L.peer_hits(path, n, caps, trace.n_accesses))

            rec = _timed_compare(peer_fn, lambda o=ours_name: np.asarray(L.ours_hits(trace, o, caps)), repeat, ours_name)
            rec["hits_peer"], rec["hits_ours"] = rec.pop("hit_tokens_peer"), rec.pop("hit_tokens_ours")
            out[name] = rec
    return out


def run(args: argparse.Namespace) -> dict:
    from tqdm import tqdm

    from tiered_kv.sim import peers as peers_mod
    from tiered_kv.sim.traces import load_trace, resolve_trace_path

    if args.points < 1 or not (0 < args.min_tokens <= args.max_tokens):
        raise ValueError("peers: need --points >= 1 and 0 < --min-tokens <= --max-tokens")
    policies = [p for p in args.policies.split(",") if p]
    bad = sorted(set(policies) - {"lru", "optimal", "fifo"})
    if bad:
        raise ValueError(f"--policies: unknown {bad}; choose from lru, optimal, fifo")
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    path = resolve_trace_path(args.trace)
    df = load_trace(path)
    bs = int(df["block_size"][0])
    if (df["block_size"] != bs).any():
        raise ValueError(f"{path}: peers need one block size per trace")
    caps_tokens = np.geomspace(args.min_tokens, args.max_tokens, args.points)
    caps_blocks = (caps_tokens // bs).astype(np.int64)
    result: dict[str, Any] = {
        "trace": str(path), "requests": df.height, "block_size": bs, "points": int(args.points),
        "capacities_tokens": caps_tokens.tolist(), "capacities_blocks": caps_blocks.tolist(),
        "numba_warmup_seconds": _warm_numba(),
        "note": "wall times on a shared machine (other jobs running); medians of --repeat interleaved "
                "rounds (peer, ours, ...), every round in *_seconds_all",
    }
    lcs_points = int(getattr(args, "libcachesim_points", 20))
    lcs_repeat = int(getattr(args, "libcachesim_repeat", 3))
    if lcs_points < 1 or lcs_repeat < 1:
        raise ValueError("peers: need --libcachesim-points >= 1 and --libcachesim-repeat >= 1")
    steps = (0 if "kvcache-simulator" in skip else 2 * len(policies)) + (0 if "lmcache" in skip else args.points)
    steps *= max(1, args.repeat)
    if "libcachesim" not in skip:
        from tiered_kv.sim.peers.libcachesim import PAIRS

        steps += len(PAIRS) * lcs_repeat
    with tqdm(total=steps, unit="step", leave=False) as bar:
        if "kvcache-simulator" not in skip:
            result["kvcache-simulator"] = _kvcache(df, path, caps_blocks, policies, args.repeat, bar)
        if "lmcache" not in skip:
            result["lmcache"] = _lmcache(df, caps_blocks, args.repeat, args.lmcache_bytes_per_token, bar)
        if "libcachesim" not in skip:
            lcs_blocks = np.unique(np.maximum(1, (np.geomspace(args.min_tokens, args.max_tokens, lcs_points)
                                                  // bs).astype(np.int64)))
            result["libcachesim"] = _libcachesim(df, lcs_blocks, lcs_repeat, bar)
    checks = [v["identical"] for peer in PEERS if peer in result
              for v in result[peer].values() if isinstance(v, dict) and "identical" in v]
    result["identical"] = all(checks) if checks else None  # None: nothing could be compared
    result["peers_run"] = len(checks)
    if not checks:
        result["message"] = f"no peer could run here; install them with: {peers_mod.INSTALL_HINT}"
    if not getattr(args, "json", False):  # the table stays readable: curves only in --json
        _drop_curves(result)
    return result


def _drop_curves(result: dict[str, Any]) -> None:
    """Take the per-capacity curves and per-round times out of ``result`` (the printed table)."""
    for peer in PEERS:
        for v in result.get(peer, {}).values():
            if isinstance(v, dict):
                for k in ("hit_tokens_peer", "hit_tokens_ours", "hits_peer", "hits_ours", "peer_seconds_all",
                          "ours_seconds_all", "peer_cpu_seconds_all", "ours_cpu_seconds_all"):
                    v.pop(k, None)
        result.get(peer, {}).pop("capacities_blocks", None)
    result.pop("capacities_tokens")
    result.pop("capacities_blocks")


# ------------------------------------------------------------------------------------ the record
def speedups(v: dict) -> tuple[Paired, Paired]:
    """(wall, CPU) peer / tiered-kv per interleaved round: median and range of the rounds' ratios."""
    return (Paired.between(every_run(v, "peer_seconds"), every_run(v, "ours_seconds")),
            Paired.between(every_run(v, "peer_cpu_seconds"), every_run(v, "ours_cpu_seconds")))


def _compared(r: dict, peer: str) -> list[tuple[str, dict]]:
    return [(pol, v) for pol, v in r.get(peer, {}).items() if isinstance(v, dict) and "identical" in v]


def render_record(r: dict) -> str:
    """The peers section from the JSON of one ``tiered-kv bench peers --json`` run."""
    lines = [f"Trace `{Path(r['trace']).name}` ({r['requests']:,} requests, {r['block_size']}-token blocks), "
             f"{r['points']} capacities log-spaced from {r['capacities_tokens'][0]:,.0f} to "
             f"{r['capacities_tokens'][-1]:,.0f} tokens. One-off costs left out of every timing: numba kernels "
             f"{sec(r['numba_warmup_seconds'])}. {r['note']}. Speed-up = peer time / tiered-kv time of each "
             "round (the two timed one after the other), the median of those ratios with their range.", "",
             f"Every point identical on every peer and policy: **{r['identical']}** ({r['peers_run']} comparisons).",
             "", "| peer | policy | tiered-kv policy | identical (mismatches) | peer wall | tiered-kv wall | "
             "speed-up, wall | speed-up, CPU |", "|---|---|---|---|---|---|---|---|"]
    for peer in ("kvcache-simulator", "lmcache"):
        for pol, v in _compared(r, peer):
            wall, cpu = speedups(v)
            lines.append(f"| {peer} | {pol} | `{v['ours_policy']}` | {v['identical']} ({v['mismatches']}) | "
                         f"{spread(every_run(v, 'peer_seconds'), sec)} | {spread(every_run(v, 'ours_seconds'), sec)} | "
                         f"{wall.text()} | {cpu.text()} |")
    for peer in ("kvcache-simulator", "lmcache", "libcachesim"):
        st = r.get(peer, {}).get("status")
        if st is not None and not st.get("available", True):
            lines.append(f"\n{peer}: not available here ({st.get('detail', '')}).")
    return "\n".join(lines)


def _summary(p: dict) -> tuple[str, str]:
    recs = [(peer, pol, speedups(v)) for peer in ("kvcache-simulator", "lmcache") for pol, v in _compared(p, peer)]
    sp = [f"{pol} vs {peer} {w.text()} wall / {c.text()} CPU" for peer, pol, (w, c) in recs]
    met = [f"identical {yes(bool(p['identical']))}"] + [
        f"{pol} vs {peer} faster {yes(w.median > 1)} wall, {yes(c.median > 1)} CPU" for peer, pol, (w, c) in recs]
    return (f"identical hit tokens at all {p['points']} capacities: {p['identical']}; speed-up (median of "
            "paired rounds, their range) " + ", ".join(sp)), "; ".join(met)


PAGES = (Page("peers", render_record, "tiered-kv bench peers --json",
              title="Parity and speed against the public simulators (`tiered-kv bench peers`)"),)
SUMMARY = (Row("parity with kvcache-simulator (lru, optimal, fifo) and LMCache (lru)", ("peers",),
               lambda *_: "identical, faster (issue 8)", _summary),)
