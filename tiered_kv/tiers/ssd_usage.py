"""How full the store is, known to every writer without a central index: the capacity bound.

Each writer used to know only its own writes, so 4 writers on a 3 MB store reached 6.5 MB
before one of them ran GC. Now the store itself carries what a writer needs, in small objects
next to the chunks (``usage/``):

* ``usage/w-<writer id>``: one per ``SSDTier`` instance that writes with a finite capacity,
  ``{"written": cumulative chunk bytes it has published, "t": wall time}``, rewritten after
  each of its puts (after the chunks, never before);
* ``usage/s-<h>``: one baseline per shard ``h`` (first hex digit of the key), written by GC
  (or by the first writer that finds none): ``{"bytes": chunk bytes of that shard, "ledgers":
  {writer: written}}``, where the ledger snapshot was read *before* the shard was measured.

Estimate = sum of the 16 baselines + for every writer ``written - min over shards of its
snapshot`` (0 where a baseline has never seen it). It never undercounts a published chunk: a
chunk whose writer's ledger predates the snapshot was on disk before the measurement; any
later one is in a ledger delta (a chunk counted twice, in a baseline and a delta, or by two
writers of the same key, only overcounts, which makes GC run a little early). GC's
measurement replaces the overcount. An object deleted by anyone only lowers the truth.

The guarantee (tests/test_ssd_faults.py, 4 writer processes on a 3 MB store): a writer with a
finite ``capacity_bytes`` and ``auto_gc`` reads the estimate before each put and runs GC first
if it is above ``high_watermark * capacity``; after publishing it rewrites its ledger, reads the
estimate again and runs GC if it is above. The last writer to finish therefore sees every
finished put, so at any moment

    stored chunk bytes <= high_watermark * capacity_bytes + new bytes of the puts in progress

(with W writers each putting at most B bytes per call: ``high * capacity + W * B``), and GC
brings them back to ``low_watermark * capacity`` plus what is in flight. Not covered: writers
with ``auto_gc=False`` or that bypass the tier, and ``.partial`` files of writers killed
mid-put (removed by GC after their grace period). Cost: two small listings and reads of
``usage/`` (16 + W objects) and one small write per put, only when the capacity is finite.

Ledgers of writers that are gone are folded away: once every shard baseline holds a writer's
current count and the ledger has not changed for ``LEDGER_IDLE_S``, GC deletes it (a writer
that comes back rewrites it, which then overcounts its old bytes until the next GC).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import uuid
from dataclasses import dataclass, field

from zarr.core.sync import sync

from tiered_kv.tiers import ssd_layout as layout

USAGE = "usage/"
LEDGER_IDLE_S = 3600.0
_WRITER_RE = re.compile(r"usage/w-([0-9a-f]{16})")
_SHARD_RE = re.compile(r"usage/s-([0-9a-f])")


def writer_path(writer: str) -> str:
    return f"{USAGE}w-{writer}"


def shard_path(shard: str) -> str:
    return f"{USAGE}s-{shard}"


@dataclass
class Baseline:
    bytes: int
    ledgers: dict[str, int]


@dataclass
class UsageView:
    """Everything under ``usage/`` at one moment."""

    ledgers: dict[str, int] = field(default_factory=dict)
    ledger_time: dict[str, float] = field(default_factory=dict)
    baselines: dict[str, Baseline] = field(default_factory=dict)

    def estimate(self) -> int | None:
        """Upper bound of the stored chunk bytes (None while a shard has no baseline)."""
        if len(self.baselines) < len(layout.SHARDS):
            return None
        total = sum(b.bytes for b in self.baselines.values())
        for w, n in self.ledgers.items():
            total += max(0, n - min(b.ledgers.get(w, 0) for b in self.baselines.values()))
        return total


def _list(store) -> list[str]:
    root = layout.local_root(store)
    if root is not None:
        try:
            return [USAGE + n for n in os.listdir(root / USAGE) if not n.endswith(".partial")]
        except (FileNotFoundError, NotADirectoryError):
            return []
    return sync(layout.list_keys(store, USAGE))


def read_view(store, *, ledgers_only: bool = False) -> UsageView:
    """Read every ledger (and baseline) object; unreadable ones count as absent."""
    paths = [p for p in _list(store) if _WRITER_RE.fullmatch(p) or (not ledgers_only and _SHARD_RE.fullmatch(p))]
    view = UsageView()
    for path, data in zip(paths, layout.get_many(store, paths, None), strict=True):
        if data is None or isinstance(data, Exception):
            continue
        try:
            doc = json.loads(data)
            if m := _WRITER_RE.fullmatch(path):
                view.ledgers[m.group(1)] = int(doc["written"])
                view.ledger_time[m.group(1)] = float(doc["t"])
            else:
                m = _SHARD_RE.fullmatch(path)
                view.baselines[m.group(1)] = Baseline(int(doc["bytes"]),
                                                      {str(k): int(v) for k, v in doc["ledgers"].items()})
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return view


def measure_shard(store, shard: str) -> int:
    """Bytes of the objects under ``chunks/<shard>/`` (partial writes included: an overcount)."""
    prefix = f"{layout.CHUNKS}{shard}/"
    root = layout.local_root(store)
    if root is not None:
        total = 0
        try:
            for e in os.scandir(root / prefix):
                if e.is_file(follow_symlinks=False):
                    total += e.stat(follow_symlinks=False).st_size
        except (FileNotFoundError, NotADirectoryError):
            return 0
        return total
    from tiered_kv.tiers import ssd_object

    if ssd_object.is_object_store(store):
        return ssd_object.size_of_prefix(store, prefix)

    async def size() -> int:
        try:
            return await store.getsize_prefix(prefix)
        except FileNotFoundError:
            return 0

    return sync(size())


def baseline_items(shard_bytes: dict[str, int], snapshot: dict[str, int]) -> list[tuple[str, bytes]]:
    return [(shard_path(h), json.dumps({"bytes": int(b), "ledgers": snapshot, "t": time.time()}).encode())
            for h, b in sorted(shard_bytes.items())]


class Usage:
    """One writer's side of the ledger (see the module docstring)."""

    def __init__(self, store, io) -> None:
        self.store = store
        self.io = io
        self.writer = uuid.uuid4().hex[:16]
        self.written = 0

    def estimate(self) -> int:
        view = read_view(self.store)
        missing = [h for h in layout.SHARDS if h not in view.baselines]
        if missing:  # first use of this store: measure those shards once, for everyone
            measured = {h: measure_shard(self.store, h) for h in missing}
            self._write(baseline_items(measured, view.ledgers))
            for h, b in measured.items():
                view.baselines[h] = Baseline(b, dict(view.ledgers))
        return view.estimate()

    def add(self, nbytes: int) -> None:
        """Record ``nbytes`` of newly published chunks (call after they are published)."""
        if nbytes <= 0:
            return
        self.written += int(nbytes)
        doc = json.dumps({"written": self.written, "t": time.time()}).encode()
        self._write([(writer_path(self.writer), doc)])

    def _write(self, items) -> None:
        for err in self.io.write(items):
            if err is not None:
                raise err


def after_gc(store, io, snapshot: dict[str, int], shard_bytes: dict[str, int]) -> None:
    """Write the baselines of the shards a GC pass owns, then fold idle ledgers away."""
    for err in io.write(baseline_items(shard_bytes, snapshot)):
        if err is not None:
            raise err
    view = read_view(store)
    if len(view.baselines) < len(layout.SHARDS):
        return
    now = time.time()
    folded = [w for w, n in view.ledgers.items()
              if now - view.ledger_time.get(w, now) >= LEDGER_IDLE_S
              and all(b.ledgers.get(w) == n for b in view.baselines.values())]
    if folded:
        io.delete([writer_path(w) for w in folded])


def high_mark(policy) -> float:
    return math.inf if math.isinf(policy.capacity_bytes) else policy.high_watermark * policy.capacity_bytes
