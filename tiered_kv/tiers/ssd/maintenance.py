"""Whole-store operations of the SSD tier: stats, verify, gc (used by SSDTier and `tiered-kv store`).

They need no namespace (every chunk carries its own header) and see a store only through its
backend and :func:`tiered_kv.tiers.ssd.scan.scan`, so they run on every store the tier runs on.

GC as several instances: ``gc(part=(i, n))`` (``tiered-kv store gc URL --part i/n``) owns
shards ``i`` of ``n`` (the 16 first hex digits of the keys, split into ``n`` contiguous ranges),
as 3FS runs one collector per storage node. Each instance scans the whole store (a prefix's
chunks are spread over all shards, and LRU needs the whole tree), computes the same global
plan, and deletes only objects in its own shards, children before parents; so instances never
delete the same object and their union is the global plan. Before deleting, an instance
re-reads the access records and spares every chunk whose record has become newer than its
scan (a reader has just returned it). Deleting is the only thing GC does to a chunk, and a
reader checks every chunk it returns and stops at the first gap, so a reader racing any
number of collectors returns a shorter valid prefix, never a wrong one.
A corrupt object is read again and removed only if it still fails. After a pass, GC writes
the usage baselines of its shards (:mod:`tiered_kv.tiers.ssd.usage`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

from tiered_kv.codec import CorruptChunk, verify_chunk
from tiered_kv.tiers.ssd import layout, scan, usage
from tiered_kv.tiers.ssd.backend import Backend
from tiered_kv.tiers.ssd.config import SSDConfig
from tiered_kv.tiers.ssd.retention import (
    RetentionPolicy,
    class_times,
    owned_shards,
    parse_part,
    plan_gc,
    reachable,
    rehome_records,
)
from tiered_kv.units import DAY_S, HOUR_S

AGE_BUCKETS = ((HOUR_S, "<1h"), (DAY_S, "1h-1d"), (3 * DAY_S, "1d-3d"), (7 * DAY_S, "3d-7d"),
               (math.inf, ">=7d"))


def _scan(backend: Backend, *, full: bool, progress: bool, desc: str, cache: dict | None = None) -> scan.Scan:
    if not progress:
        return scan.scan(backend, full=full, cache=cache)
    from tqdm import tqdm

    with tqdm(desc=desc, unit="obj", leave=False, delay=1.0) as bar:
        return scan.scan(backend, full=full, progress=bar.update, on_total=lambda n: setattr(bar, "total", n),
                         cache=cache)


def store_stats(backend: Backend, *, now: float, policy: RetentionPolicy | None = None, progress: bool = False,
                counters: dict | None = None) -> dict:
    """Summary of a store: chunks, bytes, per class and namespace, age since last access."""
    s = _scan(backend, full=False, progress=progress, desc="scanning chunk headers")
    total = sum(h.nbytes for h in s.chunks.values())
    out: dict = {"chunks": len(s.chunks), "bytes": total}
    times, anyt = class_times(s.chunks, s.records)
    by_class: dict[str, dict] = {}
    by_ns: dict[str, dict] = {}
    ages = dict.fromkeys((name for _, name in AGE_BUCKETS), 0)
    for key, h in s.chunks.items():
        c = by_class.setdefault(h.traffic_class, {"chunks": 0, "bytes": 0, "tokens": 0})
        c["chunks"] += 1
        c["bytes"] += h.nbytes
        c["tokens"] += h.tokens
        n = by_ns.setdefault(h.ns_digest.hex(), {"fmt": h.fmt, "chunks": 0, "bytes": 0})
        n["chunks"] += 1
        n["bytes"] += h.nbytes
        age = now - max(max(times[key].values()), anyt[key])
        ages[next(name for limit, name in AGE_BUCKETS if age < limit)] += 1
    out.update({
        "tokens": sum(h.tokens for h in s.chunks.values()),
        "by_class": by_class, "by_namespace": by_ns, "age_since_last_access": ages,
        "access_records": len(s.records), "corrupt_objects": len(s.corrupt), "stray_objects": len(s.strays),
        "payload_bytes": sum(h.payload_len for h in s.chunks.values()),
        "usage_estimate_bytes": usage.read_view(backend).estimate(),
    })
    if policy is not None:
        cap = policy.capacity_bytes
        out["capacity_bytes"] = None if math.isinf(cap) else int(cap)
        out["used_fraction"] = None if math.isinf(cap) else total / cap
    if counters:
        out["process_counters"] = counters
    return out


def store_verify(backend: Backend, *, repair: bool = True, partial_grace: float = SSDConfig.partial_grace,
                 progress: bool = False) -> dict:
    """Read and CRC-check every chunk; report (and with ``repair`` remove) what is broken.

    ``problems`` counts what was wrong (corrupt objects, obstacles, garbage metadata, strays
    that can be removed); a live writer's recent ``.partial`` files are not problems.
    """
    metadata = layout.check_metadata(backend, repair=repair)
    s = _scan(backend, full=True, progress=progress, desc="verifying chunks")
    strays = backend.removable(s.strays, partial_grace)
    report = {"chunks_ok": len(s.chunks), "bytes_ok": sum(h.nbytes for h in s.chunks.values()),
              "corrupt": sorted(s.corrupt.items()), "strays": sorted(s.strays),
              "metadata": sorted(metadata),
              "unreachable_chunks": len(s.chunks) - len(reachable(s.chunks)), "repaired": False,
              "problems": len(s.corrupt) + len(strays) + len(metadata)}
    if repair:
        backend.delete(list(s.corrupt) + strays)
        report["repaired"] = True
        report["removed_objects"] = len(s.corrupt) + len(strays)
    return report


def _still_corrupt(backend: Backend, paths: list[str]) -> list[str]:
    """The corrupt chunk objects that fail again on a fresh read (another writer may have
    replaced one since the scan); obstacles and other objects are returned as they are."""
    chunk_paths = [p for p in paths if layout._CHUNK_RE.fullmatch(p)]
    out = [p for p in paths if not layout._CHUNK_RE.fullmatch(p)]
    for p, data in scan.fetched(backend, chunk_paths):  # (one gone already is not listed)
        try:
            verify_chunk(data, key=bytes.fromhex(p.rsplit("/", 1)[1]))
        except CorruptChunk:
            out.append(p)
    return out


def store_gc(backend: Backend, policy: RetentionPolicy, *, now: float, dry_run: bool = False,
             orphan_grace: float = SSDConfig.orphan_grace, partial_grace: float = SSDConfig.partial_grace,
             progress: bool = False, part=None,
             header_cache: dict | None = None) -> dict:
    """One GC pass: TTL, orphans, watermark LRU, plus corrupt objects and stale partial writes.

    ``part``: ``(i, n)`` or ``"i/n"``; this pass deletes only in its share of the shards.
    ``header_cache``: a dict the caller keeps between passes (object stores; see :func:`.scan.scan`).
    """
    part = parse_part(part)
    owned = set(owned_shards(part))
    before = None if dry_run else usage.read_view(backend, ledgers_only=True)  # the ledgers, before the scan
    s = _scan(backend, full=False, progress=progress, desc="scanning chunk headers", cache=header_cache)
    plan = plan_gc(s.chunks, s.records, policy, now, orphan_grace=orphan_grace)

    def mine(path: str) -> bool:
        h = layout.shard_of(path)
        return h in owned if h is not None else (part is None or part[0] == 1)

    gone, spared, records = set(plan.removed), 0, (plan.drop_records, plan.write_records, plan.record_sources)
    if gone and not dry_run:  # readers may have touched chunks since the scan: re-read records
        gone, spared, records = _recheck(backend, s, gone, policy, now, orphan_grace, mine)
    drop, write, sources = records
    ours = [k for k in plan.removed if k in gone and mine(s.paths[k])]
    strays = [p for p in backend.removable(s.strays, partial_grace) if mine(p)]
    corrupt = [p for p in s.corrupt if mine(p)]
    removed_bytes = sum(s.chunks[k].nbytes for k in ours)
    ours_set = set(ours)
    report = {
        "now": now, "dry_run": dry_run, "part": None if part is None else f"{part[0]}/{part[1]}",
        "chunks_before": len(s.chunks), "bytes_before": plan.bytes_before,
        "expired_chunks": sum(1 for k in plan.expired if k in ours_set),
        "evicted_chunks": sum(1 for k in plan.evicted if k in ours_set),
        "orphan_chunks": sum(1 for k in plan.orphans if k in ours_set),
        "removed_chunks": len(ours), "freed_bytes": removed_bytes, "spared_by_fresh_access": spared,
        "bytes_after": plan.bytes_after, "corrupt_objects": len(corrupt), "stray_objects": len(strays),
        "access_records_dropped": sum(1 for p in drop if mine(p)),
        "access_records_moved": sum(1 for r in write if mine(sources[layout.access_path(r.key, r.traffic_class)])),
        "capacity_bytes": None if math.isinf(policy.capacity_bytes) else int(policy.capacity_bytes),
        "expired_by_class": dict(Counter(s.chunks[k].traffic_class for k in plan.expired if k in ours_set)),
    }
    if dry_run:
        return report
    corrupt = _still_corrupt(backend, corrupt)
    # Children before parents: a reader never sees a parent vanish under a surviving child.
    backend.delete([s.paths[k] for k in sorted(ours, key=lambda k: -s.chunks[k].index)])
    _rewrite_records(backend, records, mine, corrupt + strays)
    usage.after_gc(backend, before, _shard_bytes(s, owned, gone))
    return report


def _recheck(backend: Backend, s: scan.Scan, gone: set[bytes], policy: RetentionPolicy, now: float,
             orphan_grace: float, mine: Callable[[str], bool]) -> tuple[set[bytes], int, tuple]:
    """The plan again on freshly read access records: a chunk of ``gone`` read since the scan is
    spared (and counted, when this pass owns it); returns what goes, how many were spared, and
    the records."""
    fresh = scan.scan_records(backend)
    again = plan_gc(s.chunks, fresh, policy, now, orphan_grace=orphan_grace)
    spared = sum(1 for k in gone - set(again.removed) if mine(s.paths[k]))
    gone = gone & set(again.removed)
    return gone, spared, rehome_records(s.chunks, fresh, gone)


def _rewrite_records(backend: Backend, records: tuple, mine: Callable[[str], bool], extra: list[str]) -> None:
    """Write the moved access records and delete the dropped ones, with the ``extra`` objects.

    A moved record is written by the owner of the record it replaces (the removed tail's); a
    record that cannot be written only makes its prefix look older.
    """
    drop, write, sources = records
    moved = [(layout.access_path(r.key, r.traffic_class), r) for r in write]
    backend.write([(p, r.encode()) for p, r in moved if mine(sources[p])])
    backend.delete([p for p in drop if mine(p)] + extra)


def _shard_bytes(s: scan.Scan, owned: set[str], gone: set[bytes]) -> dict[str, int]:
    """Chunk bytes left in each shard a GC pass owns (its usage baselines)."""
    out = dict.fromkeys(owned, 0)
    for key, h in s.chunks.items():
        shard = layout.shard_of(s.paths[key])
        if shard in out and key not in gone:
            out[shard] += h.nbytes
    return out
