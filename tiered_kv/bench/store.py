"""SSD tier put / get_prefix throughput against plain file I/O of the same bytes, same run.

For a 128K-token prefix (512 chunks of 256 tokens) at two sizes per token (this project's
model, and a DeepSeek-like ~890 B/token cache): the tier's put of already-quantized chunks
(existence check, atomic publish through zarr's LocalStore) and its get_prefix (read, CRC32C
check, header parse of every chunk) are timed against a loop of plain ``open/write`` and
``open/read`` of the same objects, one file each (``raw``: Python's ``open(p, "rb").read()``,
bytes kept like a prefix is), the same loop on a thread pool (``raw_parallel``), and the leanest
``os.open/os.read`` loop (``raw_os``, reported beside). Reads are measured warm (page cache) and cold (``os.sync`` then
``POSIX_FADV_DONTNEED`` on every file). get_prefix latency p50/p99 is measured warm with 1, 4
and 16 concurrent reader threads. ``--naive`` also times the naive layout: one Zarr
array per chunk. Medians of ``--repeat`` runs (every run kept in ``seconds_all``); the machine may be shared, so compare ratios.

``--local-s3`` (a moto S3 server started on 127.0.0.1) or ``--url s3://bucket/prefix`` (a real
bucket, configured from the environment) benchmark the tier on object storage instead, against
raw obstore puts and gets of the same bytes at the same concurrency (tiered_kv/bench/_store_object.py; what
both write and how they time it: tiered_kv/bench/_store_payload.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from tiered_kv.bench._pages import Page, Paired, Row, sec, spread, yes
from tiered_kv.bench._store_payload import Payload, check_read, in_turn, latency_ms, payload, timed, worst
from tiered_kv.keys import DEFAULT_FORMAT, FORMATS

NAME = "store"
HELP = "SSD tier put/get_prefix throughput vs raw file I/O (128K-token prefix), p50/p99 latency"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", type=int, default=131072, help="prefix length in tokens (default 128K)")
    parser.add_argument("--block-size", type=int, default=256, help="tokens per chunk")
    parser.add_argument("--fmt", default=DEFAULT_FORMAT, choices=FORMATS, help="FP4 format")
    parser.add_argument("--kv-heads", type=int, default=2, help="this model's KV heads (global KV)")
    parser.add_argument("--head-dim", type=int, default=64, help="this model's head dim")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (median)")
    parser.add_argument("--readers", default="1,4,16", help="concurrent get_prefix readers for latency")
    parser.add_argument("--latency-seconds", type=float, default=2.0, help="time per reader count")
    parser.add_argument("--io-threads", type=int, default=1,
                        help="SSDTier io_threads (0: zarr async API; 1: caller thread; N: N threads)")
    parser.add_argument("--dir", default=None, help="directory to benchmark in (default: a temp dir)")
    parser.add_argument("--naive", action="store_true", help="also time one Zarr array per chunk")
    parser.add_argument("--quick", action="store_true", help="16K tokens, 2 repeats, short latency runs")
    obj = parser.add_mutually_exclusive_group()
    obj.add_argument("--url", default=None, metavar="s3://BUCKET/PREFIX",
                     help="benchmark on this object store (endpoint and credentials from the environment)")
    obj.add_argument("--local-s3", action="store_true", help="start a local S3 server (moto) and benchmark on it")
    parser.add_argument("--concurrency", type=int, default=64,
                        help="object stores: requests in flight, for the tier and for raw obstore (default 64)")
    parser.add_argument("--latency-runs", type=int, default=20,
                        help="object stores: get_prefix runs for p50/p99 (default 20)")


def _drop_cache(paths: list[Path]) -> None:
    """Evict files from the page cache (written back first, else DONTNEED skips dirty pages)."""
    os.sync()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _raw_write(dirpath: Path, objs: list[bytes], pool: ThreadPoolExecutor | None) -> None:
    """One plain file per chunk: open, write, close (no temp file, no rename, no fsync)."""
    def one(i: int) -> None:
        with open(dirpath / f"{i:06d}", "wb") as f:
            f.write(objs[i])

    list((pool.map if pool else map)(one, range(len(objs))))


def _raw_read(paths: list[Path], pool: ThreadPoolExecutor | None) -> int:
    """Read every file and keep the bytes (as get_prefix does: the caller holds the prefix)."""
    def one(p: Path) -> bytes:
        with open(p, "rb") as f:
            return f.read()

    return sum(len(b) for b in list((pool.map if pool else map)(one, paths)))


def _raw_read_os(paths: list[Path]) -> int:
    """The leanest plain read: os.open + fstat + os.read per file (no Python buffered IO)."""
    held = []
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            held.append(os.read(fd, os.fstat(fd).st_size))
        finally:
            os.close(fd)
    return sum(len(b) for b in held)


#: Every phase a repeat times, raw and tier alike.
PHASES = ("put", "raw_write", "raw_write_parallel", "get_warm", "raw_read_warm", "raw_read_parallel_warm",
          "raw_read_os_warm", "get_cold", "raw_read_cold", "put_with_quantize")
#: result key -> (raw phase, tier phase): raw / tier per repeat, then the median of those.
PAIRED = {"put_ratio_vs_raw": ("raw_write", "put"), "put_ratio_vs_raw_parallel": ("raw_write_parallel", "put"),
          "get_ratio_vs_raw": ("raw_read_warm", "get_warm"),
          "get_ratio_vs_raw_parallel": ("raw_read_parallel_warm", "get_warm"),
          "get_ratio_vs_raw_os_read": ("raw_read_os_warm", "get_warm"),
          "get_cold_ratio_vs_raw": ("raw_read_cold", "get_cold")}


def _size_case(label: str, ns, tokens, root: Path, args, pool) -> dict:
    """One size per token: the tier against raw file I/O of the very same packed chunks."""
    from tqdm import tqdm

    p = payload(ns, tokens)
    res: dict = {**p.sizes(ns), "quantize_cpu_s": p.quantize_s, "fmt": ns.fmt}
    timings: dict[str, list[float]] = {k: [] for k in PHASES}
    for r in tqdm(range(args.repeat), desc=f"store bench ({label})", leave=False, delay=1.0):
        tier = _size_repeat(r, root / f"{label}-{r}", ns, tokens, p, timings, args, pool)
        if r < args.repeat - 1:
            tier.close()
            shutil.rmtree(root / f"{label}-{r}")
    res.update(p.figures(timings, "seconds_all", PAIRED))
    res["get_prefix_latency_ms"] = _latency(tier, tokens, p.n_blocks, args)
    tier.close()
    if args.naive:
        res["naive_zarr_array_per_chunk"] = _naive(root / f"{label}-naive", p.objs, res["seconds"])
    shutil.rmtree(root / f"{label}-{args.repeat - 1}", ignore_errors=True)
    return res


def _size_repeat(r: int, base: Path, ns, tokens, p: Payload, timings: dict[str, list[float]], args, pool):
    """One repeat: writes (each from a clean page cache), warm reads, then cold reads, raw and tier
    in turn; the first repeat also times put with the FP4 quantization. Returns the open tier."""
    from tiered_kv.tiers.ssd import SSDConfig, SSDTier, layout

    tier = SSDTier(base / "tier", namespace=ns,  # steady state: shard dirs exist
                   config=SSDConfig(auto_gc=False, io_threads=args.io_threads, precreate_shards=True))
    for d in ("raw", "rawp"):
        (base / d).mkdir()
    raw_paths = [base / "raw" / f"{i:06d}" for i in range(p.n_blocks)]
    os.sync()
    for _ in in_turn(timings, r, [("put", partial(tier.put_quantized, tokens, p.chunks, "bench")),
                                  ("raw_write", partial(_raw_write, base / "raw", p.objs, None)),
                                  ("raw_write_parallel", partial(_raw_write, base / "rawp", p.objs, pool))]):
        os.sync()
    reads = [("get_warm", partial(tier.get_prefix, tokens)), ("raw_read_warm", partial(_raw_read, raw_paths, None)),
             ("raw_read_parallel_warm", partial(_raw_read, raw_paths, pool)),
             ("raw_read_os_warm", partial(_raw_read_os, raw_paths))]
    for name, out in in_turn(timings, r, reads):
        if name == "get_warm":
            tier.flush()  # the access record is written in the background, off the read path
        check_read(out, p)
    _drop_cache([base / "tier" / layout.chunk_path(k) for k in p.keys])
    assert timed(timings, "get_cold", partial(tier.get_prefix, tokens)).blocks == p.n_blocks
    tier.flush()
    _drop_cache(raw_paths)
    timed(timings, "raw_read_cold", partial(_raw_read, raw_paths, None))
    if r == 0:  # end to end once: FP4 quantize on this CPU + put
        t2 = SSDTier(base / "tier2", namespace=ns,
                     config=SSDConfig(background_touch=False, auto_gc=False, precreate_shards=True))
        os.sync()
        timed(timings, "put_with_quantize", partial(t2.put, tokens, p.kv, "bench"))
        t2.close()
    return tier


def _latency(tier, tokens, n_blocks: int, args) -> dict:
    """p50/p99 of warm get_prefix with N threads reading the same prefix concurrently."""
    out = {}
    for n in [int(x) for x in args.readers.split(",") if x.strip()]:
        stop = time.perf_counter() + args.latency_seconds

        def reader(stop: float = stop) -> list[float]:
            mine = []
            while True:
                t0 = time.perf_counter()
                assert tier.get_prefix(tokens).blocks == n_blocks
                mine.append(time.perf_counter() - t0)
                if time.perf_counter() > stop and len(mine) >= 3:
                    return mine

        with ThreadPoolExecutor(n) as readers:
            out[str(n)] = latency_ms([s for f in [readers.submit(reader) for _ in range(n)] for s in f.result()])
    return out


def _naive(root: Path, objs: list[bytes], med: dict) -> dict:
    """The naive layout: one uncompressed Zarr array (one chunk) per KV chunk."""
    import numpy as np
    import zarr

    g = zarr.open_group(str(root), mode="w")
    arrs = [np.frombuffer(o, dtype=np.uint8) for o in objs]
    t0 = time.perf_counter()
    for i, a in enumerate(arrs):
        z = g.create_array(f"c{i}", shape=a.shape, chunks=a.shape, dtype="uint8", compressors=None)
        z[:] = a
    put_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    g2 = zarr.open_group(str(root), mode="r")
    total = sum(g2[f"c{i}"][:].nbytes for i in range(len(arrs)))
    get_s = time.perf_counter() - t0
    shutil.rmtree(root)
    return {"put_s": put_s, "get_warm_s": get_s, "bytes": total,
            "put_ratio_vs_raw": med["raw_write"] / put_s, "get_ratio_vs_raw": med["raw_read_warm"] / get_s}


def run(args: argparse.Namespace) -> dict:
    import torch

    from tiered_kv.keys import Namespace

    if args.quick:
        args.tokens, args.repeat, args.latency_seconds = 16384, 2, 0.3
    for name in ("tokens", "block_size", "kv_heads", "head_dim", "repeat"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    if args.tokens < args.block_size:
        raise ValueError(f"--tokens: must be at least --block-size={args.block_size}, got {args.tokens}")
    torch.set_num_threads(2)
    # DeepSeek-like: 2 x 13 heads x 64 dims in MXFP4 = 884 B/token, the closest to 890 with D % 32 == 0
    shapes = {"model": ("bench-model", args.kv_heads, args.head_dim), "deepseek_890Bpt": ("bench-deepseek", 13, 64)}
    cases = {label: Namespace(model=model, fmt=args.fmt, block_size=args.block_size, kv_heads=heads, head_dim=dim)
             for label, (model, heads, dim) in shapes.items()}
    tokens = torch.arange(args.tokens, dtype=torch.int64) * 7 + 1
    if args.url or args.local_s3:
        from tiered_kv.bench._store_object import run_object

        if args.quick:
            args.latency_runs = min(args.latency_runs, 5)
        return run_object(args, cases, tokens)
    with tempfile.TemporaryDirectory(prefix="tkv-store-bench-", dir=args.dir, ignore_cleanup_errors=True) as tmp, \
            ThreadPoolExecutor(8) as pool:
        root = Path(tmp)
        sizes = {label: _size_case(label, ns, tokens, root, args, pool) for label, ns in cases.items()}
    return {
        "prefix_tokens": args.tokens, "block_size": args.block_size, "repeat": args.repeat,
        "io_threads": args.io_threads,
        "filesystem_dir": str(root.parent), "cpu_count": os.cpu_count(),
        **worst(sizes, ("put_ratio_vs_raw", "get_ratio_vs_raw", "get_cold_ratio_vs_raw")),
        "get_prefix_p99_ms": max(s["get_prefix_latency_ms"]["1"]["p99_ms"] for s in sizes.values())
        if all("1" in s["get_prefix_latency_ms"] for s in sizes.values()) else None,
        "sizes": sizes,
        "notes": "ratios = raw time / tier time (>1: tier faster); warm = page cache, cold = os.sync + "
                 "POSIX_FADV_DONTNEED; put = put_quantized (FP4 done), put_with_quantize adds CPU quantization",
    }


# ------------------------------------------------------------------------------------ the record
#: The goal for the tier: put and get within 0.8x of raw file I/O of the same bytes.
RATIO_TARGET = 0.8
#: (column, raw phase, tier phase) of the page's ratio columns: raw time / tier time.
RATIOS = (("put / raw write", "raw_write", "put"), ("get warm / raw read", "raw_read_warm", "get_warm"),
          ("get warm / raw os.read", "raw_read_os_warm", "get_warm"),
          ("get cold / raw read", "raw_read_cold", "get_cold"))


def store_ratio(size: dict, raw: str, tier: str, runs: str = "seconds_all") -> Paired:
    """raw / tier of one size case per repeat (above 1: the tier is faster), median and range."""
    return Paired.between(size[runs][raw], size[runs][tier])


def render_record(r: dict) -> str:
    """The local-directory section from the JSON of one ``tiered-kv bench store --json`` run."""
    lines = [f"Prefix of {r['prefix_tokens']:,} tokens in {r['block_size']}-token chunks, {r['repeat']} repeats "
             f"(writes and warm reads interleaved with the raw baselines, order alternating per repeat), "
             f"io_threads {r['io_threads']}, file system under `{r['filesystem_dir']}`. Each cell is raw time / "
             "tier time of each repeat (above 1: the tier is faster), the median of those paired ratios with "
             f"their range. {r['notes']}.", "",
             "| size per token | chunk | " + " | ".join(n for n, _, _ in RATIOS) + " | get_prefix p50 / p99 by readers |",
             "|---|---|" + "---|" * len(RATIOS) + "---|"]
    for label, s in r["sizes"].items():
        cells = " | ".join(store_ratio(s, a, b).text(bold=True) for _, a, b in RATIOS)
        latency = "; ".join(f"{n}: {d['p50_ms']:,.0f} / {d['p99_ms']:,.0f} ms ({d['samples']} reads)"
                            for n, d in s["get_prefix_latency_ms"].items())
        lines.append(f"| {label}: {s['kv_heads']} KV heads x {s['head_dim']}, {s['fmt']} = "
                     f"{s['bytes_per_token']:.0f} B | {s['chunk_bytes'] / 1e3:.1f} KB | {cells} | {latency} |")
    lines += ["", "Seconds per phase (median with range over the repeats):", "",
              "| size | phase | seconds | GB/s (median) |", "|---|---|---|---:|"]
    for label, s in r["sizes"].items():
        for k, v in s["seconds"].items():
            lines.append(f"| {label} | {k} | {spread(s.get('seconds_all', {}).get(k, [v]), sec)} | {s['GBps'][k]:.3f} |")
    naive = [(label, s["naive_zarr_array_per_chunk"]) for label, s in r["sizes"].items()
             if "naive_zarr_array_per_chunk" in s]
    if naive:
        lines += ["", "The layout this tier replaced, one Zarr array per chunk (one timed run each, against the "
                  "raw medians above):", "", "| size | put / raw write | get warm / raw read |", "|---|---:|---:|"]
        lines += [f"| {label} | {n['put_ratio_vs_raw']:.3f}x | {n['get_ratio_vs_raw']:.3f}x |" for label, n in naive]
    return "\n".join(lines)


S3_COMMAND = "tiered-kv bench store --local-s3 --repeat 3 --latency-runs 5 --json"
S3_TIMED = """What is timed: `put` = `SSDTier.put_quantized` (one HEAD of the last chunk, then one PUT per
chunk with `If-None-Match: *`, each chunk packed just before its PUT) vs `raw` = `obstore.put_async`
of the same packed bytes; `get` = `SSDTier.get_prefix` (sliding window of GETs, stops at the first
miss, CRC32C + key + namespace check of every chunk) vs `raw` = `obstore.get_async` of the same
objects, bytes kept. Ratio = raw time / tier time of each repeat (above 1: the tier is faster),
the median of those paired ratios with their range."""
S3_CAVEAT = """moto is a Python server sharing the machine's cores with the client, so absolute throughput
(MB/s, latency) says more about moto than about the tier, and per-repeat ratios scatter; the
tier issues the same requests as raw obstore (plus one HEAD per put) with the same concurrency,
which is what the ratios compare. Against a real bucket: `tiered-kv bench store --url
s3://bucket/prefix` (README, "The SSD tier on a bucket")."""


def _s3_row(label: str, s: dict) -> str:
    t, lat = s["seconds"], s["get_prefix_latency_ms"]
    put, get = (store_ratio(s, f"raw_{k}", k, "all_seconds") for k in ("put", "get"))
    ms_ = lambda x: f"{1e3 * x:,.0f} ms"
    name = "this model" if label == "model" else "DeepSeek-like"
    return (f"| {name}: {s['kv_heads']} x {s['head_dim']}, **{s['bytes_per_token']:.0f} B** | "
            f"{s['chunk_bytes'] / 1e3:.1f} KB | {put.text(lambda x: f'{x:.2f}', bold=True)} | "
            f"{get.text(lambda x: f'{x:.2f}', bold=True)} | {ms_(t['put'])}, {ms_(t['raw_put'])} | "
            f"{ms_(t['get'])}, {ms_(t['raw_get'])} | {lat['p50_ms']:,.0f} / {lat['p99_ms']:,.0f} ms "
            f"({lat['samples']} runs) |")


def render_s3(r: dict) -> str:
    """The object-store page's body from the JSON of ``tiered-kv bench store --local-s3 --json``."""
    worst = {k: min(store_ratio(s, f"raw_{k}", k, "all_seconds").median for s in r["sizes"].values())
             for k in ("put", "get")}
    rates = "; ".join(f"{s['chunk_bytes'] / 1e3:.0f} KB objects: {s['chunks'] / s['seconds']['raw_put']:.0f} PUTs/s "
                      f"and {s['chunks'] / s['seconds']['raw_get']:.0f} GETs/s" for s in r["sizes"].values())
    rows = "\n".join(_s3_row(label, s) for label, s in r["sizes"].items())
    return f"""Store: {r['store']}; {r['prefix_tokens']:,}-token prefix = \
{next(iter(r['sizes'].values()))['chunks']} chunks of {r['block_size']} tokens; {r['concurrency']} requests in flight \
for the tier and for raw obstore alike; {r['repeat']} repeats whose order of tier and raw alternates.

{S3_TIMED}

| size per token | chunk | put / raw | get / raw | put (tier, raw; medians) | get (tier, raw; medians) | get_prefix p50 / p99 |
|---|---|---|---|---|---|---|
{rows}

Worst case over the sizes, median of paired ratios: put {worst['put']:.2f} (goal >= {RATIO_TARGET}: \
{yes(worst['put'] >= RATIO_TARGET)}), get {worst['get']:.2f} (goal >= {RATIO_TARGET}: \
{yes(worst['get'] >= RATIO_TARGET)}); `get_prefix_p99_ms` {r['get_prefix_p99_ms']:,.0f}.

Raw obstore against this server ({rates}): when the rate hardly changes with the object
size, the server's cost per request is the limit, not bandwidth.

{S3_CAVEAT}"""


def _summary(s: dict) -> tuple[str, str]:
    parts, met = [], []
    for c in s["sizes"].values():
        bpt = f"{c['bytes_per_token']:.0f} B/token"
        vals = {n: store_ratio(c, a, b) for n, a, b in (("put", "raw_write", "put"), ("warm get", "raw_read_warm", "get_warm"),
                                                        ("cold get", "raw_read_cold", "get_cold"))}
        parts.append(f"{bpt}: " + ", ".join(f"{n} {p.text()}" for n, p in vals.items()))
        met.append(f"{bpt}: " + ", ".join(f"{n} {yes(p.median >= RATIO_TARGET)}" for n, p in vals.items()))
    return "; ".join(parts) + " (raw time / tier time, median of paired repeats)", "; ".join(met)


PAGES = (
    Page("store", render_record, "tiered-kv bench store --json",
         title="SSD tier put / get_prefix vs raw files (`tiered-kv bench store`)"),
    Page("store_s3", render_s3, S3_COMMAND, title="SSD tier on object storage (`tiered-kv bench store --local-s3`)"),
)
SUMMARY = (Row("SSD tier put / get vs raw files", ("store",), lambda *_: f">= {RATIO_TARGET}x raw (issue 3)", _summary),)
