"""The SSD tier: global KV as prefix-keyed FP4 chunks in a Zarr v3 store, with retention and GC.

A cache hit on the global KV is what makes prefill cheap, so this tier is keyed by the exact
token prefix (:mod:`tiered_kv.keys`), stores one FP4 chunk object per full block
(:mod:`tiered_kv.codec`) and keeps them under per-class TTLs and a disk-usage watermark
(:mod:`.retention`). The store is the only shared state: several processes may put, get and gc
one store at once, with no central index. A ``get_prefix`` reads chunks in order through the
store's backend (:mod:`.backend`) and stops at the first miss; its access record is written by a
background thread.

Failure behaviour, each covered by ``tests/test_ssd_reliability.py``, ``tests/test_ssd_faults.py``
and, on an S3 server, ``tests/test_ssd_s3.py``:
* a chunk that fails its checksum, length or header check is a miss, counted, and deleted;
  so is a directory where a chunk file should be;
* a chunk deleted (by another process's GC) while a reader looks it up is a miss;
* ENOSPC/EDQUOT during a put emits :class:`StoreFullWarning`; the chunks already stored stay
  readable, and chunks written past the first failure (unreachable) are removed; a recency
  record that cannot be written never fails a read, and a namespace opened on a full disk
  warns instead of failing;
* a writer killed mid-put leaves at most ``.partial`` files, which never read as chunks;
* a store that cannot say whether a chunk exists (an error, not "absent") fails the put with
  that error and writes nothing, on the sync and the async path alike;
* a file where a shard directory should be, and a ``zarr.json`` that is not a Zarr group, are
  repaired by the next writer (and reported by ``verify``);
* with a finite capacity, usage is bounded under any number of writers
  (:mod:`tiered_kv.tiers.ssd.usage` states the bound).
"""

from __future__ import annotations

import errno
import math
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from tiered_kv import codec
from tiered_kv.keys import KEY_BYTES, Namespace, as_token_array, block_keys
from tiered_kv.tiers.ssd import layout, usage
from tiered_kv.tiers.ssd.backend import open_backend
from tiered_kv.tiers.ssd.bandwidth import paced
from tiered_kv.tiers.ssd.config import SSDConfig
from tiered_kv.tiers.ssd.layout import ALREADY_PRESENT
from tiered_kv.tiers.ssd.maintenance import store_gc, store_stats, store_verify
from tiered_kv.tiers.ssd.retention import RetentionPolicy, check_class

if TYPE_CHECKING:  # typing.Unpack is Python 3.11+; the annotations are never evaluated
    from typing_extensions import Unpack

__all__ = ["Hit", "RetentionArgs", "SSDTier", "StoreFullWarning"]

_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


class StoreFullWarning(ResourceWarning):
    """A put stopped because the store ran out of space; earlier chunks are intact."""


@dataclass
class Hit:
    """The longest stored prefix of a lookup: ``blocks`` chunks covering ``hit_tokens`` tokens."""

    namespace: Namespace
    keys: list[bytes]
    raw: list[bytes] = field(repr=False)

    @property
    def headers(self) -> list[codec.ChunkHeader]:
        """Parsed chunk headers (class, creation time, FP4 sections), read from the raw bytes."""
        return [codec.read_header(r) for r in self.raw]

    @property
    def blocks(self) -> int:
        return len(self.keys)

    @property
    def hit_tokens(self) -> int:
        return self.blocks * self.namespace.block_size

    @property
    def nbytes(self) -> int:
        return sum(len(r) for r in self.raw)

    def __bool__(self) -> bool:
        return self.blocks > 0

    def chunks(self, device: str = "cpu") -> list:
        """The raw FP4 chunks (``tiered_kv.kernels.fp4.FP4Tensor``, one per block)."""
        return [codec.unpack_chunk(r, codec.read_header(r), device=device) for r in self.raw]

    def kv(self, dtype=None, device: str = "cpu"):
        """Dequantized global KV of the hit prefix: ``[hit_tokens, 2, kv_heads, head_dim]``."""
        import torch

        dtype = torch.float32 if dtype is None else dtype
        if not self.blocks:
            ns = self.namespace
            return torch.empty((0, 2, ns.kv_heads, ns.head_dim), dtype=dtype, device=device)
        return codec.dequantize_chunks(self.chunks(device), dtype)


class RetentionArgs(TypedDict, total=False):
    """The retention settings ``SSDTier`` also takes one by one (see :meth:`RetentionPolicy.make`)."""

    capacity_bytes: float | int | str
    high_watermark: float
    low_watermark: float
    ttl: float | str | dict
    traffic_classes: tuple[str, ...] | list[str] | None


class SSDTier:
    """Global KV chunks in a Zarr v3 store (see the module docstring).

    ``store``: anything :mod:`.backend` opens (a path, a URL such as ``s3://bucket/prefix`` or
    ``memory://``, a zarr v3 Store, an obstore store, a backend; None: ``~/.cache/tiered-kv/ssd``).
    ``clock`` (seconds) is injected so tests and simulations drive days in milliseconds. What to
    keep is a :class:`RetentionPolicy`, given whole as ``retention`` or by its settings
    (:class:`RetentionArgs`, e.g. ``capacity_bytes="100GiB", ttl={"agent": "3d"}``); how to
    drive the store is an :class:`~tiered_kv.tiers.ssd.config.SSDConfig`.
    """

    def __init__(self, store=None, *, namespace: Namespace, clock: Callable[[], float] = time.time,
                 config: SSDConfig | None = None, retention: RetentionPolicy | None = None,
                 **retention_args: Unpack[RetentionArgs]) -> None:
        if not isinstance(namespace, Namespace):
            raise ValueError(f"namespace: must be a tiered_kv.keys.Namespace, got {type(namespace).__name__}")
        if not callable(clock):
            raise ValueError("clock: must be a callable returning seconds")
        self.config = config = SSDConfig() if config is None else config
        if not isinstance(config, SSDConfig):
            raise ValueError(f"config: must be a tiered_kv.tiers.ssd.SSDConfig, got {type(config).__name__}")
        self.policy = _policy(retention, retention_args)
        self.namespace = namespace
        self.clock = clock
        self.counters: Counter = Counter()  # before the backend: opening it may already repair
        self._counters_lock = threading.Lock()  # the touch and GC threads count too
        backend = open_backend(store, io_threads=config.io_threads, concurrency=config.io_concurrency,
                               on_repair=self._repaired)
        self.backend = paced(backend, config.read_bandwidth, config.write_bandwidth, config.link_bandwidth)
        bounded = config.auto_gc and not math.isinf(self.policy.capacity_bytes)
        self.usage = usage.UsageLedger(self.backend, self.policy) if bounded else None
        self._gc_lock = threading.Lock()
        self._headers: dict = {}  # GC's header cache (object stores: path -> (ETag, header))
        self._touches = ThreadPoolExecutor(1, thread_name_prefix="ssd-touch") if config.background_touch else None
        self._gc_stop = threading.Event()
        self._gc_thread: threading.Thread | None = None
        self._open_layout()
        if config.precreate_shards:
            self.backend.precreate_shards()
        if config.gc_interval is not None:
            self._start_gc_thread(config.gc_interval)

    @property
    def store(self):
        """The zarr v3 Store behind the backend (what other zarr clients open)."""
        return self.backend.store

    @property
    def read_limit(self):
        """The token bucket pacing reads (None: unlimited)."""
        return getattr(self.backend, "read_limit", None)

    @property
    def write_limit(self):
        """The token bucket pacing writes (None: unlimited)."""
        return getattr(self.backend, "write_limit", None)

    # ------------------------------------------------------------------ helpers

    def _open_layout(self) -> None:
        """Root and namespace groups; garbage ``zarr.json`` is rewritten (and reported)."""
        try:
            fixed = layout.ensure_layout(self.backend, self.namespace)
        except OSError as exc:
            if not self._full(exc, f"could not write the metadata of namespace {self.namespace.model!r}; stored "
                              "chunks are readable, puts will fail until space is freed (free space, lower "
                              "capacity_bytes, or run gc)", stacklevel=4):
                raise
            return
        for path, why in fixed:
            self._repaired(path, why)

    def _count(self, **counts: int) -> None:
        """Add each value to its counter (``_count(puts=1, blocks_written=n)``), under one lock."""
        with self._counters_lock:
            self.counters.update(counts)

    def _full(self, exc: BaseException, what: str, *, stacklevel: int) -> bool:
        """Count and warn when ``exc`` says the store is full (ENOSPC and the like); else False."""
        if not (isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS):
            return False
        self._count(store_full=1)
        warnings.warn(StoreFullWarning(f"SSD tier store {self.backend.name} is full "
                                       f"({errno.errorcode.get(exc.errno, exc.errno)}): {what}"), stacklevel=stacklevel)
        return True

    def _repaired(self, path: str, reason: str) -> None:
        self._count(repaired=1)
        warnings.warn(f"SSD tier: repaired {path} in {self.backend.name}: {reason}",
                      RuntimeWarning, stacklevel=3)

    def _keys(self, tokens_or_key) -> list[bytes]:
        if isinstance(tokens_or_key, (bytes, bytearray)):
            if len(tokens_or_key) != KEY_BYTES:
                raise ValueError(f"key: must be {KEY_BYTES} bytes, got {len(tokens_or_key)}")
            return [bytes(tokens_or_key)]
        return block_keys(tokens_or_key, self.namespace)

    def _class(self, traffic_class: str | None) -> str | None:
        """A reader's class (None: refresh whichever classes the chunks have)."""
        return None if traffic_class is None else check_class(traffic_class, self.policy.traffic_classes)

    # ------------------------------------------------------------------ put

    def put(self, tokens, kv, traffic_class: str = "default", *, kv_offset: int = 0) -> int:
        """Store every full block of ``tokens`` not yet present; return how many were written.

        ``kv[i]`` is the global KV of token ``kv_offset + i`` (``[T, 2, kv_heads, head_dim]``,
        float32/bf16/fp16); ``kv_offset`` must be a multiple of ``block_size`` (an engine that
        loaded a prefix from this tier passes only the KV it computed).
        """
        arr = as_token_array(tokens)
        return self._put_blocks(block_keys(arr, self.namespace), kv, traffic_class, kv_offset, len(arr))

    def put_keys(self, keys: list[bytes], kv, traffic_class: str = "default", *, kv_offset: int = 0) -> int:
        """:meth:`put` for a caller that already holds the prompt's block keys (``block_keys``).

        ``kv`` covers the blocks from ``kv_offset`` to the last key's, exactly. Why: an engine
        hashes a prompt once and looks it up, writes it and files its host-tier entry under the
        same keys, instead of hashing it again in every call.
        """
        return self._put_blocks(_check_keys(keys), kv, traffic_class, kv_offset, None)

    def _put_blocks(self, keys: list[bytes], kv, traffic_class: str, kv_offset: int, n_tokens: int | None) -> int:
        """Check a put's class, ``kv`` and ``kv_offset`` (``n_tokens``: the prompt's length, which
        ``kv`` may cover instead of the full blocks; None: keys given, full blocks only), then put."""
        cls = check_class(traffic_class, self.policy.traffic_classes)
        bs = self.namespace.block_size
        if not isinstance(kv_offset, int) or kv_offset < 0 or kv_offset % bs:
            raise ValueError(f"kv_offset: must be a multiple of block_size={bs} and >= 0, got {kv_offset!r}")
        codec.check_kv(kv, self.namespace)
        _check_tensor_data(kv, "kv")
        covers = f"kv: covers tokens [{kv_offset}, {kv_offset + kv.shape[0]}) but "
        if n_tokens is not None and kv.shape[0] + kv_offset not in (n_tokens, len(keys) * bs):
            raise ValueError(f"{covers}tokens has {n_tokens} (kv must cover every token from kv_offset, "
                             "or every full block)")
        if n_tokens is None and kv.shape[0] + kv_offset != len(keys) * bs:
            raise ValueError(f"{covers}the {len(keys)} keys cover {len(keys) * bs} (kv must cover every "
                             "block from kv_offset)")
        first = kv_offset // bs
        if first >= len(keys):
            return 0

        def quantize(missing: list[int]) -> list:
            import torch

            blocks = kv[: (len(keys) - first) * bs].reshape(len(keys) - first, bs, *kv.shape[1:])
            if len(missing) < len(keys) - first:
                blocks = blocks[torch.tensor([m - first for m in missing])]
            return codec.quantize_blocks(blocks.reshape(-1, *kv.shape[1:]), self.namespace)

        return self._put(keys, first, quantize, cls)

    def put_quantized(self, tokens, chunks: list, traffic_class: str = "default", *, first_block: int = 0) -> int:
        """Store already-quantized chunks (``FP4Tensor`` per block, e.g. from a GPU kernel).

        ``chunks[j]`` is block ``first_block + j`` of ``tokens``; blocks already present are
        skipped. Returns how many chunks were written.
        """
        from tiered_kv.kernels.fp4 import FP4Tensor

        cls = check_class(traffic_class, self.policy.traffic_classes)
        if not isinstance(chunks, (list, tuple)):
            raise ValueError(f"chunks: must be a list of FP4Tensor (one per block), got {type(chunks).__name__}")
        keys = block_keys(tokens, self.namespace)
        if not isinstance(first_block, int) or first_block < 0 or first_block + len(chunks) > len(keys):
            raise ValueError(f"chunks: blocks [{first_block}, {first_block}+{len(chunks)}) do not fit the "
                             f"{len(keys)} full blocks of tokens")
        want = (self.namespace.block_size, *self.namespace.kv_shape)
        for j, q in enumerate(chunks):
            if not isinstance(q, FP4Tensor):
                raise ValueError(f"chunks[{j}]: must be a tiered_kv.kernels.fp4.FP4Tensor (from fp4.quantize or "
                                 f"codec.quantize_blocks), got {type(q).__name__}; to store a plain tensor use put()")
            for name in ("data", "scales"):
                _check_tensor_data(getattr(q, name, None), f"chunks[{j}].{name}")
            if tuple(q.shape) != want or q.fmt != self.namespace.fmt:
                raise ValueError(f"chunks: each must be a {self.namespace.fmt} FP4Tensor of shape {list(want)}, "
                                 f"got {q.fmt} {list(q.shape)}")
        return self._put(keys[:first_block + len(chunks)], first_block,
                         lambda missing: [chunks[m - first_block] for m in missing], cls)

    def _put(self, keys: list[bytes], first: int, quantize, cls: str) -> int:
        written, nbytes = self._write_missing(keys, first, quantize, cls)
        self._count(puts=1, blocks_written=written)
        if self.usage is not None and nbytes:  # the bound of ssd/usage.py: ledger first, then the estimate
            self.usage.add(nbytes)
            if self.usage.over_mark():
                self._gc_for_room()  # (estimates again: saves a GC if another just ran)
        return written

    def _gc_for_room(self) -> None:
        """Wait for a GC of this tier already running, then run one if still above the mark."""
        waited = not self._gc_lock.acquire(blocking=False)
        if waited:
            self._gc_lock.acquire()
        try:
            if not waited or self.usage.over_mark():
                self._count(auto_gc=1)
                self.gc()
        finally:
            self._gc_lock.release()

    def _valid_existing(self, path: str, raw: bytes) -> bool:
        """Verify-on-exists for put-if-absent: is the object already at ``path`` a valid chunk?"""
        try:
            codec.check_chunk(raw, key=bytes.fromhex(path.rsplit("/", 1)[1]), ns_digest=self.namespace.digest)
            return True
        except codec.CorruptChunk:
            return False

    def _write_missing(self, keys: list[bytes], first: int, quantize, cls: str) -> tuple[int, int]:
        present = self.backend.present_for_put([layout.chunk_path(k) for k in keys[first:]])
        missing = [first + i for i, p in enumerate(present) if not p]
        if not missing:
            return 0, 0
        qs = quantize(missing)
        now = float(self.clock())

        def make(j: int) -> tuple[str, bytes]:
            i = missing[j]
            obj = codec.pack_chunk(qs[j], namespace=self.namespace, key=keys[i],
                                   parent=keys[i - 1] if i else bytes(KEY_BYTES), index=i,
                                   traffic_class=cls, created=now)
            return layout.chunk_path(keys[i]), obj

        results, sizes = self.backend.write_stream(len(missing), make, create=True, verify=self._valid_existing)
        self._count(already_present=sum(1 for r in results if r is ALREADY_PRESENT))
        failed = {i: r for i, r in zip(missing, results, strict=True) if isinstance(r, Exception)}
        first_bad = min(failed, default=math.inf)
        ok = [n for i, n, r in zip(missing, sizes, results, strict=True) if i < first_bad and r is None]
        if failed:  # chunks past the first failure cannot be reached by a lookup: do not leave them behind
            self.backend.delete([layout.chunk_path(keys[i]) for i, r in zip(missing, results, strict=True)
                                 if i > first_bad and r is None])
            if not self._full(failed[first_bad], f"stored {len(ok)} of {len(missing)} new blocks of this put; "
                              "chunks already in the store are intact. Free space, lower capacity_bytes, or run gc.",
                              stacklevel=5):
                raise failed[first_bad]
        return len(ok), sum(ok)

    # ------------------------------------------------------------------ get

    def get_prefix(self, tokens, traffic_class: str | None = None) -> Hit:
        """Longest stored prefix of ``tokens`` (exact match from the first token).

        Every returned chunk passed its CRC32C, length and key checks. A hit counts as an access
        by ``traffic_class`` (None: refreshes whichever classes the chunks already have).
        """
        return self._lookup(block_keys(tokens, self.namespace), self._class(traffic_class))

    def get_prefix_keys(self, keys: list[bytes], traffic_class: str | None = None) -> Hit:
        """:meth:`get_prefix` for a caller that already holds the prompt's block keys."""
        return self._lookup(_check_keys(keys), self._class(traffic_class))

    def _lookup(self, keys: list[bytes], cls: str | None) -> Hit:
        hit = self._read(keys)
        self._count(lookups=1, hit_blocks=hit.blocks, miss_blocks=len(keys) - hit.blocks)
        if hit.blocks:
            self._record_access(hit.keys[-1], cls)
        return hit

    def _read(self, keys: list[bytes]) -> Hit:
        raws = self.backend.read_prefix([layout.chunk_path(k) for k in keys])
        digest = self.namespace.digest
        for i, (key, raw) in enumerate(zip(keys, raws, strict=False)):
            try:
                if raw is layout.NOT_A_FILE:
                    raise codec.CorruptChunk("a directory where the chunk file should be")
                codec.check_chunk(raw, key=key, ns_digest=digest)
            except codec.CorruptChunk as exc:
                self._remove_corrupt(layout.chunk_path(key), str(exc))
                raws = raws[:i]
                break
        return Hit(self.namespace, keys[:len(raws)], raws)

    def _remove_corrupt(self, path: str, reason: str) -> None:
        self._count(corrupt_removed=1)
        warnings.warn(f"SSD tier: removed corrupt chunk {path}: {reason}", RuntimeWarning, stacklevel=4)
        self.backend.delete([path])

    # ------------------------------------------------------------------ access, contains, delete

    def _record_access(self, key: bytes, cls: str | None) -> None:
        """Write an access record (in the touch thread, when there is one); one that cannot be
        written is counted and warned about, and never fails the read."""
        rec = layout.AccessRecord(key, cls, float(self.clock()))

        def write_record() -> None:
            try:
                layout.write_all(self.backend, [(layout.access_path(key, cls), rec.encode())])
            except Exception as exc:  # noqa: BLE001 - recency is best effort; the hit stands
                self._count(touch_errors=1)
                if not self._full(exc, "an access record was not written (the read succeeded; this prefix may "
                                  "look older to LRU)", stacklevel=6):
                    warnings.warn(f"SSD tier: access record not written ({exc!r}); the read succeeded",
                                  RuntimeWarning, stacklevel=5)

        if self._touches is None:
            write_record()
        else:
            self._touches.submit(write_record)

    def flush(self) -> None:
        """Wait until background access records are written (the one touch thread runs them in order)."""
        if self._touches is not None:
            self._touches.submit(lambda: None).result()

    def touch(self, tokens_or_key, traffic_class: str | None = None) -> None:
        """Record an access now (by ``traffic_class``) of a prefix's tail or of one key."""
        keys = self._keys(tokens_or_key)
        if keys:
            self._record_access(keys[-1], self._class(traffic_class))

    def contains(self, tokens_or_key) -> bool:
        """True if every full block of ``tokens`` (or the one ``key``) is stored; no data read."""
        keys = self._keys(tokens_or_key)
        if not keys:
            return False
        return all(self.backend.exists([layout.chunk_path(k) for k in keys]))

    def delete(self, tokens_or_key) -> int:
        """Delete the chunks of every full block of ``tokens`` (or one key); return how many existed."""
        keys = self._keys(tokens_or_key)
        paths = [layout.chunk_path(k) for k in keys]
        present = self.backend.exists(paths)
        self.backend.delete(paths)
        return sum(present)

    # ------------------------------------------------------------------ maintenance

    def stats(self, *, progress: bool = False) -> dict:
        """Chunks, bytes, by class, by namespace, age histogram, and this process's counters."""
        self.flush()
        with self._counters_lock:
            counters = dict(self.counters)
        return store_stats(self.backend, now=float(self.clock()), policy=self.policy, progress=progress,
                           counters=counters)

    def verify(self, *, repair: bool = True, progress: bool = False) -> dict:
        """Read every chunk and check it; with ``repair`` remove corrupt chunks and stale partials."""
        self.flush()
        return store_verify(self.backend, repair=repair, partial_grace=self.config.partial_grace, progress=progress)

    def gc(self, now: float | None = None, dry_run: bool = False, *, progress: bool = False, part=None) -> dict:
        """Apply TTLs, orphan cleanup and the watermarks at ``now`` (default: the injected clock).

        ``part=(i, n)`` (or ``"i/n"``): act as GC instance ``i`` of ``n``, deleting only in its
        share of the key space (see :mod:`tiered_kv.tiers.ssd.maintenance`).
        """
        self.flush()
        now = float(self.clock()) if now is None else float(now)
        report = store_gc(self.backend, self.policy, now=now, dry_run=dry_run,
                          orphan_grace=self.config.orphan_grace, partial_grace=self.config.partial_grace,
                          progress=progress, part=part, header_cache=self._headers)
        if not dry_run:
            self._count(gc_removed=report["removed_chunks"])
        return report

    def _start_gc_thread(self, interval: float) -> None:
        """Run ``gc()`` every ``interval`` seconds (wall time) in a daemon thread until ``close``."""

        def loop() -> None:
            while not self._gc_stop.wait(interval):
                try:
                    self.gc()
                except Exception as exc:  # noqa: BLE001 - keep the cache alive; report the failure
                    self._count(gc_errors=1)
                    warnings.warn(f"SSD tier background gc failed: {exc!r}", RuntimeWarning, stacklevel=1)

        self._gc_thread = threading.Thread(target=loop, name="ssd-gc", daemon=True)
        self._gc_thread.start()

    def close(self) -> None:
        self._gc_stop.set()
        if self._gc_thread is not None:
            self._gc_thread.join()
            self._gc_thread = None
        self.flush()
        if self._touches is not None:
            self._touches.shutdown(wait=True)
            self._touches = None
        self.backend.close()

    def __enter__(self) -> SSDTier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _check_keys(keys) -> list[bytes]:
    """Block keys as :func:`tiered_kv.keys.block_keys` returns them (a list of 16-byte strings)."""
    if not isinstance(keys, (list, tuple)) or not all(isinstance(k, bytes) and len(k) == KEY_BYTES for k in keys):
        raise ValueError(f"keys: must be a list of {KEY_BYTES}-byte block keys (tiered_kv.keys.block_keys)")
    return list(keys)


def _check_tensor_data(t, name: str) -> None:
    """A tensor the tier can read bytes from: no autograd graph attached, not on the meta device."""
    if getattr(t, "requires_grad", False):
        raise ValueError(f"{name}: requires grad; store the values with {name}.detach() "
                         "(the SSD tier keeps bytes, not autograd graphs)")
    if getattr(t, "is_meta", False):
        raise ValueError(f"{name}: is on the meta device (shape only, no data); pass a tensor that holds values")


def _policy(retention: RetentionPolicy | None, args: dict) -> RetentionPolicy:
    """The tier's policy: ``retention`` as given, or one made from the settings typed one by one."""
    unknown = sorted(set(args) - set(RetentionArgs.__annotations__))
    if unknown:
        raise TypeError(f"SSDTier: unexpected keyword {unknown[0]!r}; retention settings are "
                        f"{sorted(RetentionArgs.__annotations__)}, I/O settings go in config=SSDConfig(...)")
    if retention is None:
        return RetentionPolicy.make(**args)
    if args:
        raise ValueError(f"retention: give a RetentionPolicy or its settings ({sorted(args)}), not both")
    if not isinstance(retention, RetentionPolicy):
        raise ValueError(f"retention: must be a RetentionPolicy, got {type(retention).__name__}")
    return retention
