"""Where the SSD tier puts things in a Zarr v3 store: object names, records, group documents.

Layout (every path is built from hashes; no user string ever becomes part of a path)::

    zarr.json                         a Zarr v3 group; attributes describe this layout
    namespaces/<ns-digest>/zarr.json  one group per namespace (model, format, shapes) in attributes
    chunks/<h>/<key-hex>              one object per block: codec prefix + JSON header + FP4 payload
    access/<h>/<key-hex>.<cls-hash>   last access of a *prefix* by a traffic class (tiny JSON)

Why 16 shard directories (the first hex digit of the key): LocalStore writes ran faster into 16
directories than into 1 or 256 (ext4 spreads directories over block groups); lookups are by
exact name, so a large directory costs little (ext4 hashes directory entries).

Why access records are per prefix tail and not per chunk: a ``get_prefix`` that hits 512
chunks writes one record (for the last key), not 512; every chunk header stores its parent
key, so GC propagates a tail's access time to all its ancestors. A parent is therefore never
older than its children and LRU evicts prefixes from their tails, as a radix-tree cache would.

Publishing is atomic per object (``LocalStore`` writes ``<name>.<uuid>.partial`` and renames
it into place; an object store takes one PUT), so a writer killed mid-put can leave only
``.partial`` files, which never parse as chunks and which ``gc`` and ``verify`` remove once
older than a grace period (a live writer may still own them). What can never be valid is
repaired at once by whoever finds it: obstacles on a local directory
(:class:`~.zarr_backend.LocalBackend`), a ``zarr.json`` that is not a Zarr v3 group (rewritten
by :func:`ensure_layout`, so other zarr clients can open the store again), foreign names.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from zarr.core.buffer import default_buffer_prototype

from tiered_kv.keys import KEY_BYTES

LAYOUT = "tiered-kv-chunks/1"
CHUNKS = "chunks/"
ACCESS = "access/"
SHARDS = "0123456789abcdef"
_CHUNK_RE = re.compile(r"chunks/([0-9a-f])/([0-9a-f]{32})")
_ACCESS_RE = re.compile(r"access/([0-9a-f])/([0-9a-f]{32})\.([0-9a-f]{16}|any)")
#: Concurrent store operations per batch (the store's own thread pool bounds real parallelism).
IO_CONCURRENCY = 64
#: A write that found the object already there (put-if-absent) and a valid chunk in it.
ALREADY_PRESENT = "already present"


def check_io(io_threads: int, concurrency: int, *, concurrency_name: str = "concurrency") -> None:
    """One rule for a client's I/O settings, wherever they are given (SSDConfig, open_backend):
    a bool is refused (``True`` is not a thread count), and so is a concurrency below 1: with no
    request in flight an async write waits forever and a prefix read finds nothing."""
    for name, value, low, note in (("io_threads", io_threads, 0, " (0: zarr's async API)"),
                                   (concurrency_name, concurrency, 1, "")):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name}: must be an integer >= {low}{note}, got {value!r}")


def default_store_path() -> Path:
    """``$TIERED_KV_SSD`` or ``$XDG_CACHE_HOME/tiered-kv/ssd`` (``~/.cache/tiered-kv/ssd``)."""
    if os.environ.get("TIERED_KV_SSD"):
        return Path(os.environ["TIERED_KV_SSD"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "tiered-kv" / "ssd"


class NotAFile(bytes):
    """What a read returns where a chunk file should be but a directory is (never a valid chunk)."""


NOT_A_FILE = NotAFile()


def shard_of(path: str) -> str | None:
    """The shard (first hex digit of the key) of a ``chunks/`` or ``access/`` path."""
    parts = path.split("/", 2)
    return parts[1] if len(parts) >= 2 and parts[0] + "/" in (CHUNKS, ACCESS) and parts[1] in SHARDS and len(parts[1]) == 1 else None


def buffer(data: bytes):
    return default_buffer_prototype().buffer.from_bytes(data)


def as_bytes(buf) -> bytes:
    """The ``bytes`` behind a zarr CPU Buffer, without a copy when the store read into bytes."""
    arr = buf.as_numpy_array()
    base = arr.base
    if isinstance(base, bytes) and len(base) == arr.nbytes:
        return base
    return arr.tobytes()


def chunk_path(key: bytes) -> str:
    h = key.hex()
    return f"{CHUNKS}{h[0]}/{h}"


def access_path(key: bytes, traffic_class: str | None) -> str:
    h = key.hex()
    cls = "any" if traffic_class is None else hashlib.blake2b(traffic_class.encode(), digest_size=8).hexdigest()
    return f"{ACCESS}{h[0]}/{h}.{cls}"


@dataclass(frozen=True)
class AccessRecord:
    """``traffic_class`` (None: whichever classes the chunk has) read prefix ``key`` at ``time``."""

    key: bytes
    traffic_class: str | None
    time: float

    def encode(self) -> bytes:
        return json.dumps({"key": self.key.hex(), "class": self.traffic_class, "t": self.time}).encode()

    @staticmethod
    def decode(data: bytes) -> AccessRecord:
        d = json.loads(data)
        key = bytes.fromhex(d["key"])
        if len(key) != KEY_BYTES or not isinstance(d["t"], (int, float)):
            raise ValueError("bad access record")
        cls = d["class"]
        if cls is not None and not isinstance(cls, str):
            raise ValueError("bad access record class")
        return AccessRecord(key, cls, float(d["t"]))


ROOT_ATTRIBUTES = {"tiered_kv": {
    "layout": LAYOUT,
    "chunk_key": "chunks/<first hex digit of key>/<32-hex chained blake2b-128 block key>",
    "access_key": "access/<h>/<key>.<blake2b-64 of traffic class | any>",
    "usage_key": "usage/w-<writer id>-<seq> (bytes written), usage/s-<h|all> (baselines); tiers/ssd/usage.py",
    "chunk_format": "b'TKVC' prefix (version, header_len, payload_len, crc32c) + JSON header + FP4 payload",
    "docs": "tiered_kv/tiers/ssd/layout.py, tiered_kv/codec.py",
}}


def group_problem(data: bytes | None) -> str | None:
    """Why ``data`` is not a Zarr v3 group document (None: it is one)."""
    if data is None:
        return "missing"
    if isinstance(data, NotAFile):
        return "a directory, not a file"
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return "not valid JSON"
    if not isinstance(doc, dict) or doc.get("zarr_format") != 3 or doc.get("node_type") != "group":
        return "not a Zarr v3 group document"
    if not isinstance(doc.get("attributes", {}), dict):
        return "attributes are not an object"
    return None


def raise_first(results: list) -> list:
    """``results`` (per item, a value or the exception that stopped it), raising the first exception."""
    for r in results:
        if isinstance(r, Exception):
            raise r
    return results


def read_object(backend, path: str) -> bytes | None:
    """The object at ``path`` (None: there is none); a failed read raises."""
    return raise_first(backend.get_many([path]))[0]


def _fix_group(backend, path: str, attributes: dict) -> str | None:
    """Write a group document of ``attributes`` unless a valid group is at ``path`` (a missing one
    with put-if-absent); returns what was wrong with a document it had to overwrite."""
    why = group_problem(read_object(backend, path))
    if why is not None:
        doc = {"zarr_format": 3, "node_type": "group", "attributes": attributes}
        write_all(backend, [(path, json.dumps(doc, indent=2).encode())], create=why == "missing")
    return None if why == "missing" else why


def write_all(backend, items: list[tuple[str, bytes]], *, create: bool = False) -> None:
    """Write ``items`` (put-if-absent with ``create``); raise the first failure."""
    raise_first(backend.write(items, create=create))


def ensure_layout(backend, namespace=None) -> list[tuple[str, str]]:
    """Write the root group (and the namespace's group) unless they are there; repair garbage.

    A ``zarr.json`` that exists but is not a Zarr v3 group (a torn or foreign write) breaks
    every zarr client that opens the store, so it is rewritten; a valid group is never
    overwritten. Returns ``[(path, what was wrong)]`` for what was rewritten.
    """
    docs = [("zarr.json", ROOT_ATTRIBUTES)]
    if namespace is not None:
        ns = {k: getattr(namespace, k) for k in ("model", "fmt", "block_size", "kv_heads", "head_dim")}
        docs.append((f"namespaces/{namespace.digest.hex()}/zarr.json",
                     {"tiered_kv_namespace": ns | {"digest": namespace.digest.hex()}}))
    fixed = [(path, _fix_group(backend, path, attrs)) for path, attrs in docs]
    return [(path, f"{why}; rewritten") for path, why in fixed if why is not None]


def check_metadata(backend, *, repair: bool) -> list[tuple[str, str]]:
    """Problems of the root and namespace ``zarr.json`` documents (``verify``); with ``repair``
    the root is rewritten and a garbage namespace document removed (its tier rewrites it)."""
    paths = ["zarr.json", *(p for p in backend.listing("namespaces/")[0] if p.endswith("/zarr.json"))]
    problems = [(p, why) for p in paths if (why := group_problem(read_object(backend, p))) is not None]
    if repair:
        ensure_layout(backend)
        backend.delete([p for p, _ in problems if p != "zarr.json"])
    return problems


def is_store(backend) -> bool:
    """True if the backend holds an SSD-tier layout: our root group, or any chunk (a damaged root)."""
    data = read_object(backend, "zarr.json")
    if group_problem(data) is None:
        attrs = json.loads(data).get("attributes", {})
        if isinstance(attrs.get("tiered_kv"), dict) and attrs["tiered_kv"].get("layout") == LAYOUT:
            return True
    return backend.has_chunks()


async def bounded(coros: Iterable[Awaitable], limit: int = IO_CONCURRENCY,
                  on_done: Callable[[], None] | None = None) -> list:
    """Run awaitables with at most ``limit`` in flight; results in order, exceptions returned."""
    sem = asyncio.Semaphore(limit)

    async def one(c):
        async with sem:
            try:
                return await c
            except Exception as exc:  # noqa: BLE001 - returned to the caller, which decides
                return exc
            finally:
                if on_done is not None:
                    on_done()

    return await asyncio.gather(*(one(c) for c in coros))


async def list_keys(store, prefix: str) -> list[str]:
    try:
        return [k async for k in store.list_prefix(prefix)]
    except FileNotFoundError:
        return []
