"""Functions the multi-process SSD tests run in child processes, and the data they share.

Module-level so that ``multiprocessing`` (spawn or forkserver) can import them by name (the
tests preload ``tiered_kv.testing.store_suite``, which imports this module). Several processes
share one store, a LocalStore directory or S3 (:func:`open_spec`).
"""

from __future__ import annotations

import random
import time
import traceback
import warnings
from pathlib import Path

import torch

from tiered_kv import codec
from tiered_kv.keys import DEFAULT_FORMAT, Namespace
from tiered_kv.testing.store_suite.base import BS, make_tier, namespace

STRESS_PROMPTS = 6


def stress_tokens(i: int) -> torch.Tensor:
    """Prompt ``i``: prompts share leading blocks (a system prompt), then diverge."""
    shared = torch.arange(2 * BS)
    own = torch.arange(BS * (2 + i % 4)) + 1000 * (i + 1)
    return torch.cat([shared, own])


def stress_kv(tokens: torch.Tensor) -> torch.Tensor:
    """KV that depends only on (position, token), so every writer stores the same bytes per key."""
    pos = torch.arange(len(tokens), dtype=torch.float32)
    base = torch.sin(tokens.to(torch.float32)[:, None] * 0.37 + pos[:, None] * 0.11 + torch.arange(128) * 0.05)
    return (base * (1 + pos[:, None] % 7)).reshape(len(tokens), 2, 2, 32)


def stress_references() -> dict[int, torch.Tensor]:
    """FP4 round trip of every stress prompt's KV (what a reader must get back, bit for bit)."""
    ns = namespace()
    out = {}
    for i in range(STRESS_PROMPTS):
        kv = stress_kv(stress_tokens(i))
        out[i] = codec.dequantize_chunks(codec.quantize_blocks(kv, ns), torch.float32)
    return out


def stress_worker(role: str, root, seconds: float, seed: int, barrier, results, refs) -> None:
    """One process of the concurrency test: 'writer', 'reader' or 'gc' ('gc1/2': GC instance 1
    of 2, owning half the key space). ``root``: a store spec (:func:`open_spec`). Reports counts."""
    torch.set_num_threads(1)
    rng = random.Random(seed)
    part = role[2:] or None if role.startswith("gc") else None
    role = "gc" if role.startswith("gc") else role
    tier = make_tier(open_spec(root), namespace(), time.time, capacity_bytes=12_000, high_watermark=0.9,
                     low_watermark=0.5, orphan_grace=0.0, auto_gc=role == "writer")
    out = {"role": role, "ops": 0, "checked_blocks": 0, "wrong": 0, "hits": 0, "errors": ""}
    codec.dequantize_chunks(codec.quantize_blocks(stress_kv(stress_tokens(0)), namespace()), torch.float32)  # warm-up
    barrier.wait()
    stop = time.time() + seconds
    try:
        warnings.simplefilter("ignore")
        while time.time() < stop:
            i = rng.randrange(STRESS_PROMPTS)
            toks = stress_tokens(i)
            if role == "writer":
                tier.put(toks, stress_kv(toks), rng.choice(["agent", "chatbot"]))
            elif role == "reader":
                hit = tier.get_prefix(toks, "agent")
                if hit.blocks:
                    out["hits"] += 1
                    out["checked_blocks"] += hit.blocks
                    if not torch.equal(hit.kv(), refs[i][:hit.hit_tokens]):
                        out["wrong"] += 1
            else:
                tier.gc(part=part)
                time.sleep(0.02)
            out["ops"] += 1
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the test
        out["errors"] = traceback.format_exc() + repr(exc)
    tier.close()
    results.put(out)


def kill_namespace(kv_heads: int = 8, head_dim: int = 256) -> Namespace:
    return Namespace(model="kill", fmt=DEFAULT_FORMAT, block_size=64, kv_heads=kv_heads, head_dim=head_dim)


def kill_target(root, ready_path: str, kv_heads: int = 8, head_dim: int = 256) -> None:
    """Puts large chunks forever (killed with SIGKILL by the test mid-write); ``root``: a spec."""
    torch.set_num_threads(1)
    ns = kill_namespace(kv_heads, head_dim)
    tier = make_tier(open_spec(root), ns, time.time, io_threads=4)
    kv = torch.randn(64 * 16, 2, kv_heads, head_dim)
    i = 0
    while True:
        tier.put(torch.arange(64 * 16) + 100_000 * i, kv, "agent")
        if i == 0:
            Path(ready_path).write_text("ready")
        i += 1


# ---------------------------------------------------------------------- capacity bound under writers

def capacity_namespace() -> Namespace:
    """Mid-size chunks (32 tokens x 2 x 4 x 64: about 8.9 KB in MXFP4) for the capacity test."""
    return Namespace(model="capacity", fmt=DEFAULT_FORMAT, block_size=32, kv_heads=4, head_dim=64)


CAPACITY_BLOCKS = 8  # blocks per put: one writer's batch


def capacity_writer(store_spec, capacity: int, seconds: float, seed: int, barrier, results) -> None:
    """Puts new prefixes (never seen before) as fast as it can into a store of ``capacity``
    bytes until it has written half of ``capacity`` itself (or ``seconds`` passed); reports its
    puts, the largest bytes one put wrote and its auto-GC count."""
    torch.set_num_threads(1)
    ns = capacity_namespace()
    tier = make_tier(open_spec(store_spec), ns, time.time, capacity_bytes=capacity, high_watermark=0.9,
                     low_watermark=0.5, orphan_grace=0.0)
    g = torch.Generator().manual_seed(seed)
    kv = torch.randn(CAPACITY_BLOCKS * ns.block_size, 2, ns.kv_heads, ns.head_dim, generator=g)
    chunks = codec.quantize_blocks(kv, ns)  # once: the test is about bytes, not quantization
    out = {"puts": 0, "max_put_bytes": 0, "auto_gc": 0, "errors": ""}
    barrier.wait()
    stop = time.time() + seconds
    try:
        while time.time() < stop and tier.usage.written < capacity / 2:
            toks = torch.arange(CAPACITY_BLOCKS * ns.block_size) + 1_000_000 * (seed + 1) + 1000 * out["puts"]
            before = tier.usage.written
            tier.put_quantized(toks, chunks, "c")
            out["max_put_bytes"] = max(out["max_put_bytes"], tier.usage.written - before)
            out["puts"] += 1
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        out["errors"] = traceback.format_exc() + repr(exc)
    out["auto_gc"] = tier.counters["auto_gc"]
    tier.close()
    results.put(out)


def bandwidth_reader(root: str, rate: float, n_tokens: int, reads: int, barrier, hold, results) -> None:
    """Reads the prefix ``arange(n_tokens)`` ``reads`` times through ``read_bandwidth=rate``;
    reports (bytes, monotonic start, end), then keeps its tier open until ``hold`` is set."""
    tier = make_tier(root, read_bandwidth=rate)
    toks = torch.arange(n_tokens)
    barrier.wait()
    t0, nbytes = time.monotonic(), 0
    for _ in range(reads):
        nbytes += tier.get_prefix(toks).nbytes
    results.put((nbytes, t0, time.monotonic()))
    hold.wait(60)
    tier.close()


def open_spec(spec):
    """A store from a picklable spec: a path, or ("s3", bucket, prefix, endpoint) for tests."""
    if isinstance(spec, tuple) and spec[0] == "s3":
        from tiered_kv.testing.local_s3 import s3_store

        return s3_store(*spec[1:])
    from zarr.storage import LocalStore

    return LocalStore(spec)
