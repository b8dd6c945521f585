"""Where the SSD tier puts things in a Zarr v3 store, and how a whole store is scanned.

Layout (every path is built from hashes; no user string ever becomes part of a path)::

    zarr.json                         a Zarr v3 group; attributes describe this layout
    namespaces/<ns-digest>/zarr.json  one group per namespace (model, format, shapes) in attributes
    chunks/<h>/<key-hex>              one object per block: codec prefix + JSON header + FP4 payload
    access/<h>/<key-hex>.<cls-hash>   last access of a *prefix* by a traffic class (tiny JSON)

Why 16 shard directories (the first hex digit of the key): writing 512 chunks of 226 KB through
LocalStore ran at 0.73x the speed of plain writes into 1 directory, 0.83x into 16, 0.60x into 256
(ext4 spreads directories over block groups); lookups are by exact name, so a large
directory costs little (ext4 hashes directory entries).

Why access records are per prefix tail and not per chunk: a ``get_prefix`` that hits 512
chunks writes one record (for the last key), not 512; every chunk header stores its parent
key, so GC propagates a tail's access time to all its ancestors. A parent is therefore never
older than its children and LRU evicts prefixes from their tails, as a radix-tree cache would.

Publishing is atomic per object: ``LocalStore`` writes a ``<name>.<uuid>.partial`` file and
renames it into place (zarr >= 3.0), ``MemoryStore`` assigns a dict entry, an object store
takes one PUT (:mod:`tiered_kv.tiers.ssd_object`). Opening a store from a path or URL:
:mod:`tiered_kv.tiers.ssd_stores`. A writer killed mid-put can leave only
``.partial`` files, which never parse as chunks and which ``gc`` and ``verify`` remove once
they are older than a grace period (a live writer may still own them).

What can never be valid is repaired at once, by whoever finds it: a directory where an object
belongs, a file where a shard directory belongs (both only on a local directory; see
:func:`local_listing`), a ``zarr.json`` that is not a Zarr v3 group (rewritten by
:func:`ensure_layout`, so other zarr clients can open the store again), foreign names under
``chunks/`` and ``access/``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from zarr.abc.store import RangeByteRequest, Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from tiered_kv.codec import HEADER_PROBE, ChunkHeader, CorruptChunk, read_header, verify_chunk
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


def default_store_path() -> Path:
    """``$TIERED_KV_SSD`` or ``$XDG_CACHE_HOME/tiered-kv/ssd`` (``~/.cache/tiered-kv/ssd``)."""
    if os.environ.get("TIERED_KV_SSD"):
        return Path(os.environ["TIERED_KV_SSD"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "tiered-kv" / "ssd"


def local_root(store: Store) -> Path | None:
    """The directory behind a LocalStore (used only for mtimes of partial files)."""
    root = getattr(store, "root", None)
    return Path(root) if isinstance(root, (str, Path)) else None


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


def class_hash(traffic_class: str | None) -> str:
    if traffic_class is None:
        return "any"
    return hashlib.blake2b(traffic_class.encode(), digest_size=8).hexdigest()


def access_path(key: bytes, traffic_class: str | None) -> str:
    h = key.hex()
    return f"{ACCESS}{h[0]}/{h}.{class_hash(traffic_class)}"


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


def _group_json(attributes: dict) -> bytes:
    return json.dumps({"zarr_format": 3, "node_type": "group", "attributes": attributes}, indent=2).encode()


ROOT_ATTRIBUTES = {"tiered_kv": {
    "layout": LAYOUT,
    "chunk_key": "chunks/<first hex digit of key>/<32-hex chained blake2b-128 block key>",
    "access_key": "access/<h>/<key>.<blake2b-64 of traffic class | any>",
    "usage_key": "usage/w-<writer id>-<seq> (bytes written), usage/s-<h|all> (baselines); tiers/ssd_usage.py",
    "chunk_format": "b'TKVC' prefix (version, header_len, payload_len, crc32c) + JSON header + FP4 payload",
    "docs": "tiered_kv/tiers/ssd_layout.py, tiered_kv/codec.py",
}}


def namespace_attributes(namespace) -> dict:
    return {"tiered_kv_namespace": {
        "model": namespace.model, "fmt": namespace.fmt, "block_size": namespace.block_size,
        "kv_heads": namespace.kv_heads, "head_dim": namespace.head_dim, "digest": namespace.digest.hex()}}


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


async def _get_whole(store: Store, path: str) -> bytes | None:
    try:
        buf = await store.get(path, prototype=default_buffer_prototype())
    except IsADirectoryError:
        return NOT_A_FILE
    except (FileNotFoundError, NotADirectoryError):
        return None
    return None if buf is None else buf.to_bytes()


async def _fix_group(store: Store, path: str, doc: bytes, problems: list[tuple[str, str]]) -> None:
    data = await _get_whole(store, path)
    why = group_problem(data)
    if why is None:
        return
    if why == "missing":
        await store.set_if_not_exists(path, buffer(doc))
        return
    problems.append((path, f"{why}; rewritten"))
    root = local_root(store)
    if root is not None and (root / path).is_dir():
        await store.delete(path)
    await store.set(path, buffer(doc))


async def ensure_layout(store: Store, namespace=None) -> list[tuple[str, str]]:
    """Write the root group (and the namespace's group) unless they are there; repair garbage.

    A ``zarr.json`` that exists but is not a Zarr v3 group (a torn or foreign write) breaks
    every zarr client that opens the store, so it is rewritten; a valid group is never
    overwritten. Returns ``[(path, what was wrong)]`` for what was rewritten.
    """
    problems: list[tuple[str, str]] = []
    await _fix_group(store, "zarr.json", _group_json(ROOT_ATTRIBUTES), problems)
    if namespace is not None:
        path = f"namespaces/{namespace.digest.hex()}/zarr.json"
        await _fix_group(store, path, _group_json(namespace_attributes(namespace)), problems)
    return problems


async def check_metadata(store: Store, *, repair: bool) -> list[tuple[str, str]]:
    """Problems of the root and namespace ``zarr.json`` documents (``verify``); with ``repair``
    the root is rewritten and a garbage namespace document removed (its tier rewrites it)."""
    problems: list[tuple[str, str]] = []
    why = group_problem(await _get_whole(store, "zarr.json"))
    if why is not None:
        problems.append(("zarr.json", why))
        if repair:
            await _fix_group(store, "zarr.json", _group_json(ROOT_ATTRIBUTES), [])
    for path in await list_keys(store, "namespaces/"):
        if not path.endswith("/zarr.json"):
            continue
        why = group_problem(await _get_whole(store, path))
        if why is not None:
            problems.append((path, why))
            if repair:
                await store.delete(path)
    return problems


def is_store(store: Store) -> bool:
    """True if ``store`` holds an SSD-tier layout: our root group, or any chunk (a damaged root)."""
    data = sync(_get_whole(store, "zarr.json"))
    if group_problem(data) is None:
        attrs = json.loads(data).get("attributes", {})
        if isinstance(attrs.get("tiered_kv"), dict) and attrs["tiered_kv"].get("layout") == LAYOUT:
            return True
    root = local_root(store)
    if root is not None:
        return any((root / CHUNKS / h).is_dir() for h in SHARDS)

    async def any_chunk() -> bool:
        try:
            async for _ in store.list_prefix(CHUNKS):
                return True
        except FileNotFoundError:
            return False
        return False

    return sync(any_chunk())


def precreate_shards(store: Store) -> None:
    """Create the 16 ``chunks/<h>`` and ``access/<h>`` directories of a LocalStore now.

    LocalStore creates a shard directory on the first write into it; on this project's machine
    a mkdir costs about as much as writing a 35 KB chunk, so a long-lived store (or a benchmark
    of its steady state) creates them once up front.
    """
    root = local_root(store)
    if root is None:
        return
    for prefix in (CHUNKS, ACCESS):
        for h in range(16):
            os.makedirs(root / prefix / f"{h:x}", exist_ok=True)


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


@dataclass
class Scan:
    """One pass over a store: every chunk header, access record and stray object."""

    chunks: dict[bytes, ChunkHeader] = field(default_factory=dict)
    paths: dict[bytes, str] = field(default_factory=dict)
    corrupt: dict[str, str] = field(default_factory=dict)  # path -> reason
    records: dict[str, AccessRecord] = field(default_factory=dict)  # path -> record
    strays: list[str] = field(default_factory=list)  # partial writes and foreign names


async def list_keys(store: Store, prefix: str) -> list[str]:
    try:
        return [k async for k in store.list_prefix(prefix)]
    except FileNotFoundError:
        return []


def local_listing(root: Path, prefix: str) -> tuple[list[str], dict[str, str]]:
    """Keys of the files under ``root/prefix`` and the obstacles found there (path -> reason).

    An obstacle can never be valid and blocks every write to its place: a directory where an
    object file belongs (``chunks/3/<key>/``) or a file where a shard directory belongs
    (``chunks/3``, or ``chunks`` itself). One ``os.scandir`` per directory (faster than zarr's
    ``rglob`` listing, which also cannot see an empty directory).
    """
    name = prefix.rstrip("/")
    top = root / name
    files: list[str] = []
    obstacles: dict[str, str] = {}
    try:
        entries = list(os.scandir(top))
    except FileNotFoundError:
        return files, obstacles
    except NotADirectoryError:
        return files, {name: f"a file where directory {name}/ should be"}
    for e in entries:
        key = f"{prefix}{e.name}"
        is_shard = len(e.name) == 1 and e.name in SHARDS
        if not e.is_dir(follow_symlinks=False):
            if is_shard:
                obstacles[key] = f"a file where shard directory {key}/ should be"
            else:
                files.append(key)
            continue
        if not is_shard:  # a foreign directory: its files are strays
            files += [p.relative_to(root).as_posix() for p in Path(e.path).rglob("*") if p.is_file()]
            continue
        for f in os.scandir(e.path):
            if f.is_dir(follow_symlinks=False):
                obstacles[f"{key}/{f.name}"] = "a directory where an object file should be"
            else:
                files.append(f"{key}/{f.name}")
    return files, obstacles


def _listing(store: Store, prefix: str) -> tuple[list[str], dict[str, str]]:
    root = local_root(store)
    if root is not None:
        return local_listing(root, prefix)
    return sync(list_keys(store, prefix)), {}


def _parse_header(data: bytes, path: str, store: Store, *, full: bool) -> ChunkHeader | None:
    if full:
        return verify_chunk(data)
    try:
        return read_header(data)
    except CorruptChunk as exc:
        if "truncated header" not in str(exc) or len(data) < HEADER_PROBE:
            raise
    whole = get_many(store, [path], None)[0]  # a header longer than the probe
    return None if whole is None else read_header(whole)


def get_many(store: Store, paths: list[str], byte_range, on_done: Callable[[int], None] | None = None
             ) -> list[bytes | None | Exception]:
    """Objects (or their first bytes) at ``paths``: zarr's sync API when the store has it
    (no event-loop hand-off per object), else its async API under a concurrency bound."""
    from zarr.abc.store import SupportsSyncStore

    proto = default_buffer_prototype()
    if isinstance(store, SupportsSyncStore):
        out: list[bytes | None | Exception] = []
        for p in paths:
            try:
                buf = store.get_sync(p, prototype=proto, byte_range=byte_range)
                out.append(None if buf is None else as_bytes(buf))
            except IsADirectoryError:
                out.append(NOT_A_FILE)
            except (FileNotFoundError, NotADirectoryError):
                out.append(None)
            except Exception as exc:  # noqa: BLE001 - returned like the async path does
                out.append(exc)
            if on_done is not None:
                on_done(1)
        return out
    done = (lambda: on_done(1)) if on_done else None
    res = sync(bounded((store.get(p, prototype=proto, byte_range=byte_range) for p in paths), on_done=done))
    return [r if r is None or isinstance(r, Exception) else as_bytes(r) for r in res]


def scan(store: Store, *, full: bool = False, progress: Callable[[int], None] | None = None,
         on_total: Callable[[int], None] | None = None, cache: dict | None = None) -> Scan:
    """Read every chunk header (``full``: every chunk, CRC-checked) and every access record.

    Obstacles (:func:`local_listing`) are reported in ``corrupt``; deleting one removes it.
    ``cache`` (object stores, header scans): ``{path: (version, header)}`` kept by the caller
    between scans. A published chunk never changes, and a rewritten one has a new ETag, so a
    header whose object still has the listed version is not read again (a GC pass then costs
    one listing plus the new chunks' headers). The dict is updated in place.
    """
    versions = object_versions(store, CHUNKS) if cache is not None and not full else None
    if versions is not None:
        chunk_keys, obstacles = list(versions), {}
    else:
        chunk_keys, obstacles = _listing(store, CHUNKS)
    access_keys, more = _listing(store, ACCESS)
    if on_total is not None:
        on_total(len(chunk_keys) + len(access_keys))
    out = Scan()
    out.corrupt.update(obstacles)
    out.corrupt.update(more)
    chunk_paths = []
    for path in chunk_keys:
        m = _CHUNK_RE.fullmatch(path)
        if m and m.group(2).startswith(m.group(1)):
            chunk_paths.append((path, bytes.fromhex(m.group(2))))
        else:
            out.strays.append(path)
    if versions is not None:
        cached = {}
        for p, _ in chunk_paths:
            entry = cache.get(p)
            if entry is not None and entry[0] == versions[p]:
                cached[p] = entry[1]
        for path in [p for p in list(cache) if p not in versions]:
            cache.pop(path, None)
        for path, key in chunk_paths:
            if path in cached:
                out.chunks[key] = cached[path]
                out.paths[key] = path
        chunk_paths = [(p, k) for p, k in chunk_paths if p not in cached]
    probe = None if full else RangeByteRequest(0, HEADER_PROBE)
    datas = get_many(store, [p for p, _ in chunk_paths], probe, progress)
    for (path, key), data in zip(chunk_paths, datas, strict=True):
        if data is None:
            continue  # deleted under our feet
        if isinstance(data, Exception):
            raise data
        try:
            res = _parse_header(data, path, store, full=full)
        except CorruptChunk as exc:
            out.corrupt[path] = str(exc)
            continue
        if res is None:
            continue
        if res.key != key:
            out.corrupt[path] = f"chunk holds key {res.key.hex()}"
        else:
            out.chunks[key] = res
            out.paths[key] = path
            if versions is not None:
                cache[path] = (versions[path], res)
    _read_records(store, access_keys, out, progress)
    return out


def _read_records(store: Store, access_keys: list[str], out: Scan, progress=None) -> None:
    rec_paths = []
    for path in access_keys:
        if _ACCESS_RE.fullmatch(path):
            rec_paths.append(path)
        else:
            out.strays.append(path)
    for path, data in zip(rec_paths, get_many(store, rec_paths, None, progress), strict=True):
        if data is None:
            continue
        if isinstance(data, Exception):
            raise data
        try:
            rec = AccessRecord.decode(data)
        except (ValueError, KeyError, TypeError):
            out.corrupt[path] = "unreadable access record"
            continue
        if access_path(rec.key, rec.traffic_class) != path:
            out.corrupt[path] = "access record does not match its path"
            continue
        out.records[path] = rec


def scan_records(store: Store) -> dict[str, AccessRecord]:
    """Every valid access record, read now (GC re-reads them just before deleting)."""
    keys, _ = _listing(store, ACCESS)
    out = Scan()
    _read_records(store, keys, out)
    return out.records


def removable_strays(store: Store, strays: list[str], grace: float) -> list[str]:
    """Strays to remove now. Only a ``.partial`` file may belong to a live writer (zarr's
    LocalStore writes ``<key>.<uuid>.partial`` then renames it): it stays until it is
    ``grace`` seconds old. Any other stray name can never become valid and goes at once."""
    root = local_root(store)
    now = time.time()
    out = []
    for path in strays:
        if root is None or grace <= 0 or not path.endswith(".partial"):
            out.append(path)
            continue
        try:
            age = now - (root / path).stat().st_mtime
        except FileNotFoundError:
            continue
        if age >= grace:
            out.append(path)
    return out


async def delete_all(store: Store, paths: Iterable[str]) -> int:
    """Delete objects concurrently (object stores: bulk requests of up to 1000 keys, in the
    order given); a path already gone counts as deleted."""
    paths = list(paths)
    if _obstore_of(store) is not None:
        await bulk_delete(_obstore_of(store), paths)
        return len(paths)
    results = await bounded(store.delete(p) for p in paths)
    for res in results:
        if isinstance(res, Exception) and not isinstance(res, FileNotFoundError):
            raise res
    return len(paths)


def _obstore_of(store):
    """The obstore store behind zarr's ObjectStore (None for any other store)."""
    from zarr.storage import ObjectStore

    return store.store if isinstance(store, ObjectStore) else None


async def bulk_delete(obs_store, paths: list[str]) -> None:
    """S3 DeleteObjects (and the like) in batches of 1000, one batch after the other."""
    import obstore as obs

    for lo in range(0, len(paths), 1000):
        try:
            await obs.delete_async(obs_store, paths[lo:lo + 1000])
        except FileNotFoundError:  # stores without a bulk delete report a missing key
            for p in paths[lo:lo + 1000]:
                try:
                    await obs.delete_async(obs_store, p)
                except FileNotFoundError:
                    pass


def object_versions(store, prefix: str) -> dict[str, str] | None:
    """``{path: version}`` (ETag, else size and mtime) of the objects under ``prefix`` from one
    listing, for object stores; None for other stores."""
    inner = _obstore_of(store)
    if inner is None:
        return None
    import obstore as obs

    async def listing() -> dict[str, str]:
        out = {}
        async for batch in obs.list(inner, prefix=prefix):
            for m in batch:
                out[m["path"]] = m.get("e_tag") or f"{m['size']}@{m['last_modified']}"
        return out

    return sync(listing())
