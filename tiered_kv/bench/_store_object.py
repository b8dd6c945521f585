"""`tiered-kv bench store --local-s3 | --url s3://bucket/prefix`: the SSD tier on object storage.

What each side does is :data:`.store.S3_TIMED` (the page prints it); get_prefix latency is one
reader's, ``--latency-runs`` runs. moto's server runs as a child process on 127.0.0.1, in its own
interpreter so that client and server do not share a GIL (why the ratios and not the GB/s are what
to read: :data:`.store.S3_CAVEAT`). On a real bucket everything is written under a fresh
``tkv-bench-<id>/`` below the URL's prefix and deleted afterwards.
"""

from __future__ import annotations

import time
import uuid

from zarr.core.sync import sync

from tiered_kv.bench._store_payload import check_read, in_turn, latency_ms, payload, worst
from tiered_kv.tiers.ssd import layout


def _raw_put(store, paths: list[str], objs: list[bytes], limit: int) -> None:
    import obstore as obs

    puts = (obs.put_async(store, p, o, use_multipart=False) for p, o in zip(paths, objs, strict=True))
    layout.raise_first(sync(layout.bounded(puts, limit)))


def _raw_get(store, paths: list[str], limit: int) -> int:
    import obstore as obs

    async def get(p: str):
        return await (await obs.get_async(store, p)).bytes_async()

    held = layout.raise_first(sync(layout.bounded((get(p) for p in paths), limit)))
    return sum(len(b) for b in held)


def _delete_prefix(store, prefix: str) -> None:
    """Remove what a repeat wrote (bulk deletes); a failure here only warns."""
    import warnings

    import obstore as obs

    async def run() -> None:
        paths = [m["path"] async for batch in obs.list(store, prefix=prefix) for m in batch]
        for lo in range(0, len(paths), 1000):
            await obs.delete_async(store, paths[lo:lo + 1000])

    try:
        sync(run())
    except Exception as exc:  # noqa: BLE001 - leftovers cost space, not correctness
        warnings.warn(f"bench store: could not delete {prefix}: {' '.join(str(exc).split())[:200]}",
                      RuntimeWarning, stacklevel=2)


def _child(base, prefix: str):
    """An obstore store rooted ``prefix`` below ``base`` (same bucket, config and credentials)."""
    from obstore.store import S3Store

    if isinstance(base, S3Store):
        root = (base.prefix or "").strip("/")
        return S3Store(config=base.config, prefix=f"{root}/{prefix}".strip("/"),
                       client_options=base.client_options, retry_config=base.retry_config)
    raise ValueError(f"--url: only s3:// stores are benchmarked, got {type(base).__name__}")


def _case(label: str, ns, tokens, base, args, run_id: str) -> dict:
    """One size per token on the object store: the tier against raw obstore, ``--repeat`` times."""
    from tiered_kv.tiers.ssd import SSDConfig, SSDTier

    p = payload(ns, tokens)
    paths = [layout.chunk_path(k) for k in p.keys]
    timings: dict[str, list[float]] = {k: [] for k in ("put", "raw_put", "get", "raw_get")}
    lat: list[float] = []
    for r in range(args.repeat):
        prefix = f"tkv-bench-{run_id}/{label}-{r}"
        tier_store, raw_store = _child(base, f"{prefix}/tier"), _child(base, f"{prefix}/raw")
        tier = SSDTier(tier_store, namespace=ns,
                       config=SSDConfig(auto_gc=False, background_touch=False, io_concurrency=args.concurrency))
        list(in_turn(timings, r, [("put", lambda tier=tier: tier.put_quantized(tokens, p.chunks, "bench")),
                                  ("raw_put", lambda s=raw_store: _raw_put(s, paths, p.objs, args.concurrency))]))
        for _, out in in_turn(timings, r, [("get", lambda tier=tier: tier.get_prefix(tokens)),
                                           ("raw_get", lambda s=raw_store: _raw_get(s, paths, args.concurrency))]):
            check_read(out, p)
        if r == args.repeat - 1:
            for _ in range(args.latency_runs):
                t0 = time.perf_counter()
                assert tier.get_prefix(tokens).blocks == p.n_blocks
                lat.append(time.perf_counter() - t0)
        tier.close()
        _delete_prefix(base, prefix)
    ratios = {"put_ratio_vs_raw": ("raw_put", "put"), "get_ratio_vs_raw": ("raw_get", "get")}
    return {**p.sizes(ns), **p.figures(timings, "all_seconds", ratios), "get_prefix_latency_ms": latency_ms(lat)}


def run_object(args, cases: dict, tokens) -> dict:
    """The object-store variant of `bench store` (``cases``: label -> Namespace)."""
    from contextlib import ExitStack

    from tiered_kv.tiers.ssd import open_backend
    from tiered_kv.tiers.ssd.object_backend import ObjectBackend, is_object_url

    if args.concurrency < 1:
        raise ValueError(f"--concurrency: must be >= 1, got {args.concurrency}")
    with ExitStack() as stack:
        if args.local_s3:
            from tiered_kv.testing.local_s3 import LocalS3

            s3 = stack.enter_context(LocalS3(thread=False))
            base = s3.store(s3.bucket(), "bench")
            where = f"local moto S3 server at {s3.endpoint} (child process)"
        else:
            if not is_object_url(args.url):
                raise ValueError(f"--url: must be an object-store URL (s3://bucket/prefix), got {args.url!r}")
            backend = open_backend(args.url)  # (checks the bucket can be reached)
            assert isinstance(backend, ObjectBackend)
            base = backend.obs_store
            where = backend.name
        run_id = uuid.uuid4().hex[:8]
        sizes = {label: _case(label, ns, tokens, base, args, run_id) for label, ns in cases.items()}
    return {
        "backend": "s3", "store": where, "local_s3": bool(args.local_s3), "prefix_tokens": len(tokens),
        "block_size": args.block_size, "repeat": args.repeat, "concurrency": args.concurrency,
        **worst(sizes, ("put_ratio_vs_raw", "get_ratio_vs_raw")),
        "get_prefix_p99_ms": max(s["get_prefix_latency_ms"]["p99_ms"] for s in sizes.values()),
        "sizes": sizes,
        "notes": "ratios = raw obstore time / tier time (>1: tier faster), same bytes and concurrency; "
                 "put = put_quantized (FP4 done) with put-if-absent; get = get_prefix with CRC checks",
    }
