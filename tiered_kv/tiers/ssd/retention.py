"""Retention of the SSD tier: per-class TTL and watermark LRU, planned as a pure function.

DeepSeek keeps agent traffic 3 days and chatbot traffic 7 days, while the store reclaims space
by LRU under a disk-usage watermark. Both rules run here, on a snapshot of the store (chunk
headers and access records from :func:`tiered_kv.tiers.ssd.scan.scan`), at a time ``now``
given by the caller, so tests and the simulator drive days in milliseconds and nothing reads
the wall clock.

Rules, in order:

1. Last access per class: a chunk's own header (the put) plus every access record of it or
   of any descendant (a record on a prefix tail covers the whole prefix). A record without a
   class refreshes every class the chunk already has.
2. TTL: a chunk survives while ``now - last_access[c] <= ttl[c]`` for *some* class ``c`` that
   touched it, so a chunk shared by several classes keeps the longest retention. A class
   without a TTL keeps its chunks forever (capacity still applies).
3. Orphans: a chunk whose parent is gone can never be hit (a hit walks from block 0); it is
   removed once older than a grace period (its parent may still be in flight from a put).
4. Watermarks: while used bytes exceed ``high * capacity``, evict least recently used chunks
   (ties: deepest block first) until used bytes are at most ``low * capacity``. Because a
   parent's last access is never older than its children's, eviction eats prefixes from
   their tails.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from tiered_kv.codec import ChunkHeader
from tiered_kv.tiers.ssd.layout import SHARDS, AccessRecord, access_path
from tiered_kv.units import parse_bytes, parse_duration, parse_ttl

_ROOT = bytes(16)
MAX_CLASS_LEN = 64


def check_class(traffic_class: str, declared: tuple[str, ...] | None, *, name: str = "traffic_class") -> str:
    if not isinstance(traffic_class, str) or not traffic_class or len(traffic_class) > MAX_CLASS_LEN:
        raise ValueError(f"{name}: must be a non-empty string of at most {MAX_CLASS_LEN} characters, "
                         f"got {traffic_class!r}")
    if declared is not None and traffic_class not in declared:
        raise ValueError(f"{name}: unknown traffic class {traffic_class!r}; declared classes: {list(declared)}")
    return traffic_class


@dataclass(frozen=True)
class RetentionPolicy:
    """Capacity, watermarks and per-class TTLs (seconds; ``inf`` = no TTL).

    Build one with :meth:`make`, which parses sizes and durations ("100GiB", "3d").
    """

    capacity_bytes: float = math.inf
    high_watermark: float = 0.9
    low_watermark: float = 0.8
    ttl: Mapping[str, float] = field(default_factory=dict)
    default_ttl: float = math.inf
    traffic_classes: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not (self.capacity_bytes > 0):
            raise ValueError(f"capacity_bytes: must be > 0 bytes, got {self.capacity_bytes!r}")
        if not (0 < self.high_watermark <= 1):
            raise ValueError(f"high_watermark: must be in (0, 1], got {self.high_watermark!r}")
        if not (0 <= self.low_watermark <= self.high_watermark):
            raise ValueError(f"low_watermark: must be in [0, high_watermark={self.high_watermark}], "
                             f"got {self.low_watermark!r}")
        for cls, seconds in self.ttl.items():
            check_class(cls, self.traffic_classes, name="ttl")
            if not (seconds >= 0):
                raise ValueError(f"ttl[{cls!r}]: must be a duration >= 0 seconds, got {seconds!r}")
        if not (self.default_ttl >= 0):
            raise ValueError(f"default_ttl: must be a duration >= 0 seconds, got {self.default_ttl!r}")

    @classmethod
    def make(cls, capacity_bytes=math.inf, high_watermark: float = 0.9, low_watermark: float = 0.8,
             ttl=None, traffic_classes=None) -> RetentionPolicy:
        """Parse user-typed values: ``ttl`` is seconds, or anything :func:`~tiered_kv.units.parse_ttl`
        reads ("7d", "agent=3d,chatbot=7d", a list of those, {class: duration}); a class's own
        TTL beats a bare one, and a class with neither keeps its chunks (``inf``).

        A number object (not text) is read here because parse_ttl refuses one: to the library it
        is seconds (``SSDTier(ttl=3600)``, a connector's JSON config), but parse_ttl also reads
        sweep files, where a TOML ``ttl = 3`` would leave its unit to a guess (text without a
        unit, as typed on a command line, is seconds there too)."""
        cap = math.inf if capacity_bytes in (None, math.inf, "inf") else parse_bytes(capacity_bytes, name="capacity_bytes")
        classes = None if traffic_classes is None else tuple(check_class(c, None, name="traffic_classes")
                                                             for c in traffic_classes)
        if ttl is None or isinstance(ttl, (int, float)):  # a number: seconds (see above)
            per_class, default = {}, None if ttl is None else parse_duration(ttl, name="ttl")
        else:
            per_class, default = parse_ttl(ttl, name="ttl")
        default = math.inf if default is None else default
        for name, value in (("high_watermark", high_watermark), ("low_watermark", low_watermark)):
            if not isinstance(value, (int, float)):
                raise ValueError(f"{name}: must be a fraction of capacity_bytes, got {value!r}")
        return cls(cap, float(high_watermark), float(low_watermark), per_class, default, classes)

    def ttl_for(self, traffic_class: str) -> float:
        return self.ttl.get(traffic_class, self.default_ttl)


@dataclass
class GCPlan:
    """What one GC pass removes, and why (chunks by key, access records by store path)."""

    expired: list[bytes] = field(default_factory=list)
    evicted: list[bytes] = field(default_factory=list)
    orphans: list[bytes] = field(default_factory=list)
    drop_records: list[str] = field(default_factory=list)
    write_records: list[AccessRecord] = field(default_factory=list)
    record_sources: dict[str, str] = field(default_factory=dict)  # moved record's path -> path it replaces
    last_access: dict[bytes, float] = field(default_factory=dict)
    bytes_before: int = 0
    bytes_after: int = 0

    @property
    def removed(self) -> list[bytes]:
        return self.expired + self.orphans + self.evicted


def class_times(chunks: Mapping[bytes, ChunkHeader], records: Mapping[str, AccessRecord]
                ) -> tuple[dict[bytes, dict[str, float]], dict[bytes, float]]:
    """Per chunk, last access per class and last class-less access, propagated to ancestors."""
    times = {k: {h.traffic_class: h.created} for k, h in chunks.items()}
    anyt = dict.fromkeys(chunks, -math.inf)
    for rec in records.values():
        if rec.key not in chunks:
            continue
        if rec.traffic_class is None:
            anyt[rec.key] = max(anyt[rec.key], rec.time)
        else:
            t = times[rec.key]
            t[rec.traffic_class] = max(t.get(rec.traffic_class, -math.inf), rec.time)
    for key in sorted(chunks, key=lambda k: chunks[k].index, reverse=True):
        parent = chunks[key].parent
        if parent in chunks:
            pt = times[parent]
            for c, t in times[key].items():
                if t > pt.get(c, -math.inf):
                    pt[c] = t
            anyt[parent] = max(anyt[parent], anyt[key])
    return times, anyt


def reachable(chunks: Mapping[bytes, ChunkHeader]) -> set[bytes]:
    """Chunks whose whole chain down to block 0 is present."""
    ok: set[bytes] = set()
    for key in sorted(chunks, key=lambda k: chunks[k].index):
        h = chunks[key]
        if (h.index == 0 and h.parent == _ROOT) or h.parent in ok:
            ok.add(key)
    return ok


def plan_gc(chunks: Mapping[bytes, ChunkHeader], records: Mapping[str, AccessRecord],
            policy: RetentionPolicy, now: float, *, orphan_grace: float) -> GCPlan:
    """Decide which chunks TTL, orphaning and the watermarks remove at time ``now`` (pure)."""
    plan = GCPlan()
    times, anyt = class_times(chunks, records)
    live = reachable(chunks)
    gone: set[bytes] = set()
    for key, h in chunks.items():
        t = times[key]
        plan.last_access[key] = max(max(t.values()), anyt[key])
        keep_until = max(max(tc, anyt[key]) + policy.ttl_for(c) for c, tc in t.items())
        if now > keep_until:
            plan.expired.append(key)
            gone.add(key)
        elif key not in live and now - h.created > orphan_grace:
            plan.orphans.append(key)
            gone.add(key)
    plan.bytes_before = sum(h.nbytes for h in chunks.values())
    used = plan.bytes_before - sum(chunks[k].nbytes for k in gone)
    if used > policy.high_watermark * policy.capacity_bytes:
        target = policy.low_watermark * policy.capacity_bytes
        order = sorted((k for k in chunks if k not in gone),
                       key=lambda k: (plan.last_access[k], -chunks[k].index, k))
        for key in order:
            if used <= target:
                break
            plan.evicted.append(key)
            gone.add(key)
            used -= chunks[key].nbytes
    plan.bytes_after = used
    plan.drop_records, plan.write_records, plan.record_sources = rehome_records(chunks, records, gone)
    return plan


def rehome_records(chunks, records, gone: set[bytes]) -> tuple[list[str], list[AccessRecord], dict[str, str]]:
    """Records on removed tails move to the nearest surviving ancestor, so it keeps its age.

    Returns (paths of records to delete, records to write, {written path: path it replaces})."""
    drop: list[str] = []
    best: dict[str, AccessRecord] = {}
    source: dict[str, str] = {}
    for path, rec in records.items():
        if rec.key in chunks and rec.key not in gone:
            continue
        drop.append(path)
        key = rec.key
        while key in chunks and key in gone:
            key = chunks[key].parent
        if key not in chunks:
            continue
        p = access_path(key, rec.traffic_class)
        existing = records.get(p)
        if existing is not None and existing.time >= rec.time:
            continue
        if p not in best or best[p].time < rec.time:
            best[p] = AccessRecord(key, rec.traffic_class, rec.time)
            source[p] = path
    return drop, list(best.values()), source


# ---------------------------------------------------------------------- GC instances by key range

def parse_part(part) -> tuple[int, int] | None:
    """``None``, ``(i, n)`` or ``"i/n"``: GC instance ``i`` of ``n`` (1 <= i <= n <= 16)."""
    if part is None:
        return None
    try:
        i, n = (int(x) for x in part.split("/")) if isinstance(part, str) else (int(part[0]), int(part[1]))
    except (ValueError, TypeError, IndexError):
        raise ValueError(f"part: must be 'i/n' (GC instance i of n), got {part!r}") from None
    if not (1 <= n <= 16 and 1 <= i <= n):
        raise ValueError(f"part: must be i/n with 1 <= i <= n <= 16 (16 shards), got {i}/{n}")
    return i, n


def owned_shards(part: tuple[int, int] | None) -> str:
    """The shards (hex digits) GC instance ``part`` owns: ``n`` contiguous ranges of the 16."""
    if part is None:
        return SHARDS
    i, n = part
    return "".join(h for k, h in enumerate(SHARDS) if k * n // len(SHARDS) == i - 1)
