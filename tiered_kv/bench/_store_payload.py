"""What both store benchmarks (:mod:`.store` on files, :mod:`._store_object` on object storage)
write and how they time it: the payload of packed FP4 chunks, the repeats whose tier and raw
sides take turns going first, the check of a read, get_prefix latency quantiles, and the worst
ratio over the sizes.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tiered_kv.bench._pages import Paired, clocked


@dataclass(frozen=True)
class Payload:
    """One prefix as both sides write it: ``objs`` are the packed chunks, the very bytes the raw side
    writes; ``total`` is their bytes."""

    kv: Any
    chunks: list
    keys: list[bytes]
    objs: list[bytes]
    quantize_s: float
    n_blocks: int
    total: int

    def sizes(self, ns) -> dict:
        """The figures of the payload both benches report per size."""
        return {"chunks": self.n_blocks, "chunk_bytes": len(self.objs[0]), "total_bytes": self.total,
                "bytes_per_token": self.chunks[0].nbytes / ns.block_size, "kv_heads": ns.kv_heads,
                "head_dim": ns.head_dim}

    def figures(self, timings: dict[str, list[float]], runs_key: str, paired: dict[str, tuple[str, str]]) -> dict:
        """What both benches report of their timings: the median seconds of every phase timed, every
        repeat (under ``runs_key``), the GB/s of the medians, and for each ``paired`` key (raw phase,
        tier phase) the median of raw / tier per repeat."""
        runs = {k: v for k, v in timings.items() if v}
        med = {k: statistics.median(v) for k, v in runs.items()}
        return {"seconds": med, runs_key: runs, "GBps": {k: self.total / v / 1e9 for k, v in med.items()},
                **{key: Paired.between(timings[raw], timings[tier]).median for key, (raw, tier) in paired.items()}}


def payload(ns, tokens) -> Payload:
    import torch

    from tiered_kv import codec
    from tiered_kv.keys import block_keys

    g = torch.Generator().manual_seed(0)
    kv = torch.randn(len(tokens) // ns.block_size * ns.block_size, 2, ns.kv_heads, ns.head_dim, generator=g)
    chunks, quantize_s = clocked(codec.quantize_blocks, kv, ns)
    keys = block_keys(tokens, ns)
    objs = [codec.pack_chunk(q, namespace=ns, key=k, parent=keys[i - 1] if i else bytes(16), index=i,
                             traffic_class="bench", created=0.0) for i, (q, k) in enumerate(zip(chunks, keys, strict=True))]
    return Payload(kv, chunks, keys, objs, quantize_s, len(tokens) // ns.block_size, sum(len(o) for o in objs))


def timed(timings: dict[str, list[float]], name: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, its wall time appended to ``timings[name]``."""
    out, s = clocked(fn)
    timings[name].append(s)
    return out


def in_turn(timings: dict[str, list[float]], r: int, steps: list[tuple[str, Callable[[], Any]]]) -> Iterator[Any]:
    """Time each ``(name, fn)`` step in an order that flips every repeat, so that neither side
    always runs first; yields each step's name and result as it finishes."""
    for name, fn in (steps if r % 2 == 0 else steps[::-1]):
        yield name, timed(timings, name, fn)


def check_read(out: Any, p: Payload) -> None:
    """A tier read holds every block and the packed bytes (give or take header digits); a raw one the bytes."""
    if isinstance(out, int):
        assert out == p.total
    else:
        assert out.blocks == p.n_blocks and abs(out.nbytes - p.total) <= 32 * p.n_blocks


def worst(sizes: dict[str, dict], keys: tuple[str, ...]) -> dict[str, float]:
    """Each ratio's lowest over the sizes per token: the JSON's headline figures."""
    return {key: min(s[key] for s in sizes.values()) for key in keys}


def latency_ms(lat: list[float]) -> dict:
    """p50 / p99 (ms, None without samples) and the number of samples of get_prefix latencies."""
    lat = sorted(lat)
    q = lambda p: 1e3 * lat[min(len(lat) - 1, int(p * len(lat)))] if lat else None
    return {"p50_ms": q(0.5), "p99_ms": q(0.99), "samples": len(lat)}
