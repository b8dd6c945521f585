"""How full the store is, known to every writer without a central index: the capacity bound.

Only a tier with a finite ``capacity_bytes`` and ``auto_gc`` keeps a ledger (:class:`UsageLedger`);
the store itself carries what a writer needs, in small objects next to the chunks:

* ``usage/w-<writer id>-<seq>``: one per writing ``SSDTier``, ``{"written": cumulative chunk
  bytes it has published, "t": wall time}``, written after each of its puts (after the chunks)
  under the next sequence number, then the previous one deleted; readers take each writer's
  highest number. (A new name each time: on ext4, renaming over an existing file flushes it
  to disk on every put. On an object store, where a PUT replaces an object atomically, it stays
  ``-1``.)
* ``usage/s-<h>``: a baseline of shard ``h``, written by a GC instance that owns that shard:
  ``{"bytes": chunk bytes of the shard, "ledgers": {writer: written}}``, the ledgers read
  *before* the shard was measured; ``usage/s-all`` holds all 16 shards in one object. Per
  shard the newest baseline is used.

Estimate = sum of the 16 baselines + for every writer ``written - min over shards of its
snapshot``. It never undercounts a published chunk: one whose writer's ledger predates the
snapshot was on disk before the measurement, any later one is in a ledger delta (a chunk
counted twice only overcounts, which makes GC run a little early, until GC measures again).

The guarantee (tests/test_ssd_faults.py, 4 writer processes on a 3 MB store): after publishing
a put's chunks, a writer rewrites its ledger, reads the estimate and runs GC if it is above
``high_watermark * capacity``. Because the ledger is written before the estimate is read, the
last writer to finish sees every finished put, so at any moment

    stored chunk bytes <= high_watermark * capacity_bytes + new bytes of the puts in progress

and GC brings them back to ``low_watermark * capacity`` plus what is in flight. Not covered:
writers with ``auto_gc=False`` or that bypass the tier, and ``.partial`` files of writers killed
mid-put. Cost per put: one small write, one listing of ``usage/`` and a read of its 1-17 + W
objects. A gone writer's ledger is folded away once every baseline holds its count and it has
not changed for ``LEDGER_IDLE_S`` (a writer that comes back overcounts until the next GC).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass, field

from tiered_kv.tiers.ssd import layout

USAGE = "usage/"
LEDGER_IDLE_S = 3600.0
_WRITER_RE = re.compile(r"usage/w-([0-9a-f]{16})-([0-9]{1,15})")
_SHARD_RE = re.compile(r"usage/s-([0-9a-f]|all)")


def writer_path(writer: str, seq: int) -> str:
    return f"{USAGE}w-{writer}-{seq}"


def shard_path(shard: str) -> str:
    return f"{USAGE}s-{shard}"


@dataclass
class Baseline:
    bytes: int
    ledgers: dict[str, int]
    t: float = 0.0


@dataclass
class UsageView:
    """Everything under ``usage/`` at one moment."""

    ledgers: dict[str, int] = field(default_factory=dict)
    ledger_time: dict[str, float] = field(default_factory=dict)
    ledger_paths: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # writer -> [(seq, path)]
    baselines: dict[str, Baseline] = field(default_factory=dict)

    def estimate(self) -> int | None:
        """Upper bound of the stored chunk bytes (None while a shard has no baseline)."""
        if len(self.baselines) < len(layout.SHARDS):
            return None
        total = sum(b.bytes for b in self.baselines.values())
        for w, n in self.ledgers.items():
            total += max(0, n - min(b.ledgers.get(w, 0) for b in self.baselines.values()))
        return total


def read_view(backend, *, ledgers_only: bool = False) -> UsageView:
    """Read every ledger (and baseline) object; unreadable ones count as absent."""
    view = UsageView()
    paths = []
    for p in backend.listing(USAGE)[0]:
        if m := _WRITER_RE.fullmatch(p):
            view.ledger_paths.setdefault(m.group(1), []).append((int(m.group(2)), p))
        elif not ledgers_only and _SHARD_RE.fullmatch(p):
            paths.append(p)
    for entries in view.ledger_paths.values():
        entries.sort()
        paths.append(entries[-1][1])  # a writer's newest entry; older ones are stale
    for path, data in zip(paths, backend.get_many(paths), strict=True):
        if data is None or isinstance(data, Exception):
            continue
        try:
            doc = json.loads(data)
            if m := _WRITER_RE.fullmatch(path):
                view.ledgers[m.group(1)] = int(doc["written"])
                view.ledger_time[m.group(1)] = float(doc["t"])
            else:
                m = _SHARD_RE.fullmatch(path)
                snap = {str(k): int(v) for k, v in doc["ledgers"].items()}
                t = float(doc["t"])
                per_shard = doc["shards"] if m.group(1) == "all" else {m.group(1): doc["bytes"]}
                for h, b in per_shard.items():
                    if h in layout.SHARDS and (h not in view.baselines or view.baselines[h].t < t):
                        view.baselines[h] = Baseline(int(b), snap, t)
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return view


def baseline_items(shard_bytes: dict[str, int], snapshot: dict[str, int]) -> list[tuple[str, bytes]]:
    """One ``usage/s-all`` object for all 16 shards, else one ``usage/s-<h>`` per shard."""
    t = time.time()
    if set(shard_bytes) == set(layout.SHARDS):
        doc = {"shards": {h: int(b) for h, b in sorted(shard_bytes.items())}, "ledgers": snapshot, "t": t}
        return [(shard_path("all"), json.dumps(doc).encode())]
    return [(shard_path(h), json.dumps({"bytes": int(b), "ledgers": snapshot, "t": t}).encode())
            for h, b in sorted(shard_bytes.items())]


class UsageLedger:
    """One writer's side of the ledger (see the module docstring), for a finite ``policy``."""

    def __init__(self, backend, policy) -> None:
        self.backend = backend
        self.high_mark = policy.high_watermark * policy.capacity_bytes
        self.writer = uuid.uuid4().hex[:16]
        self.written = 0
        self.seq = 0

    def over_mark(self) -> bool:
        """Is the store's usage estimate above the high watermark (in bytes)?"""
        return self.estimate() > self.high_mark

    def estimate(self) -> int:
        view = read_view(self.backend)
        missing = [h for h in layout.SHARDS if h not in view.baselines]
        if missing:  # first use of this store: measure those shards once, for everyone
            # (a shard's size counts its .partial files too: an overcount, never an undercount)
            measured = {h: self.backend.size_of_prefix(f"{layout.CHUNKS}{h}/") for h in missing}
            layout.write_all(self.backend, baseline_items(measured, view.ledgers))
            for h, b in measured.items():
                view.baselines[h] = Baseline(b, dict(view.ledgers))
        return view.estimate()

    def add(self, nbytes: int) -> None:
        """Record ``nbytes`` of newly published chunks (call after they are published)."""
        if nbytes <= 0:
            return
        self.written += int(nbytes)
        doc = json.dumps({"written": self.written, "t": time.time()}).encode()
        self.seq = 1 if self.backend.rename_free else self.seq + 1  # (rename_free: one name, overwritten)
        layout.write_all(self.backend, [(writer_path(self.writer, self.seq), doc)])
        if self.seq > 1:
            self.backend.delete([writer_path(self.writer, self.seq - 1)])


def after_gc(backend, before: UsageView, shard_bytes: dict[str, int]) -> None:
    """Write the baselines of the shards a GC pass owns (``before``: the ledgers read before
    its scan), then fold idle ledgers away."""
    layout.write_all(backend, baseline_items(shard_bytes, before.ledgers))
    stale = [p for entries in before.ledger_paths.values() for _, p in entries[:-1]]  # a writer died mid-swap
    if stale:
        backend.delete(stale)
    now = time.time()
    if not any(now - t >= LEDGER_IDLE_S for t in before.ledger_time.values()):
        return
    view = read_view(backend)
    if len(view.baselines) < len(layout.SHARDS):
        return
    folded = [w for w, n in view.ledgers.items()
              if now - view.ledger_time.get(w, now) >= LEDGER_IDLE_S
              and all(b.ledgers.get(w) == n for b in view.baselines.values())]
    if folded:
        backend.delete([p for w in folded for _, p in view.ledger_paths[w]])
