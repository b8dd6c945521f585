"""One pass over a whole store: every chunk header, access record and stray object.

``stats``, ``verify`` and ``gc`` see a store only through this scan, which sees it only through
its backend (:mod:`tiered_kv.tiers.ssd.backend`), so they run unchanged on a local directory,
an in-memory store or a bucket. A header scan reads the first ``HEADER_PROBE`` bytes of each
chunk; a full scan (``verify``) reads and CRC-checks every chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from zarr.abc.store import RangeByteRequest

from tiered_kv.codec import HEADER_PROBE, ChunkHeader, CorruptChunk, read_header, verify_chunk
from tiered_kv.tiers.ssd import layout
from tiered_kv.tiers.ssd.layout import _ACCESS_RE, _CHUNK_RE, ACCESS, CHUNKS, AccessRecord, access_path


@dataclass
class Scan:
    """One pass over a store: every chunk header, access record and stray object."""

    chunks: dict[bytes, ChunkHeader] = field(default_factory=dict)
    paths: dict[bytes, str] = field(default_factory=dict)
    corrupt: dict[str, str] = field(default_factory=dict)  # path -> reason
    records: dict[str, AccessRecord] = field(default_factory=dict)  # path -> record
    strays: list[str] = field(default_factory=list)  # partial writes and foreign names


def _parse_header(data: bytes, path: str, backend, *, full: bool) -> ChunkHeader | None:
    if full:
        return verify_chunk(data)
    try:
        return read_header(data)
    except CorruptChunk as exc:
        if "truncated header" not in str(exc) or len(data) < HEADER_PROBE:
            raise
    whole = layout.read_object(backend, path)  # a header longer than the probe
    return None if whole is None else read_header(whole)


def fetched(backend, paths: list[str], byte_range=None, progress=None):
    """``(path, data)`` of the objects at ``paths`` that are still there (None: deleted under our
    feet); a failed read raises."""
    got = layout.raise_first(backend.get_many(paths, byte_range, progress))
    return [(path, data) for path, data in zip(paths, got, strict=True) if data is not None]


def scan(backend, *, full: bool = False, progress: Callable[[int], None] | None = None,
         on_total: Callable[[int], None] | None = None, cache: dict | None = None) -> Scan:
    """Read every chunk header (``full``: every chunk, CRC-checked) and every access record.

    Obstacles (a local directory's, see its backend's ``listing``) are reported in ``corrupt``;
    deleting one removes it. ``cache`` (object stores, header scans): ``{path: (version, header)}``
    kept by the caller between scans. A published chunk never changes, and a rewritten one has a
    new ETag, so a header whose object still has the listed version is not read again (a GC pass
    then costs one listing plus the new chunks' headers). The dict is updated in place.
    """
    versions = backend.versions(CHUNKS) if cache is not None and not full else None
    chunk_keys, obstacles = (list(versions), {}) if versions is not None else backend.listing(CHUNKS)
    access_keys, more = backend.listing(ACCESS)
    if on_total is not None:
        on_total(len(chunk_keys) + len(access_keys))
    out = Scan(corrupt={**obstacles, **more})
    keys: dict[str, bytes] = {}
    for path in chunk_keys:
        m = _CHUNK_RE.fullmatch(path)
        if m and m.group(2).startswith(m.group(1)):
            keys[path] = bytes.fromhex(m.group(2))
        else:
            out.strays.append(path)
    if versions is not None:
        keys = _take_cached(keys, versions, cache, out)
    probe = None if full else RangeByteRequest(0, HEADER_PROBE)
    for path, data in fetched(backend, list(keys), probe, progress):
        try:
            res = _parse_header(data, path, backend, full=full)
        except CorruptChunk as exc:
            out.corrupt[path] = str(exc)
            continue
        if res is None:
            continue
        if res.key != keys[path]:
            out.corrupt[path] = f"chunk holds key {res.key.hex()}"
        else:
            out.chunks[res.key] = res
            out.paths[res.key] = path
            if versions is not None:
                cache[path] = (versions[path], res)
    _read_records(backend, access_keys, out, progress)
    return out


def _take_cached(keys: dict[str, bytes], versions: dict[str, str], cache: dict, out: Scan) -> dict[str, bytes]:
    """Put the cached headers whose object still has its version into ``out``; drop cache entries
    of objects that are gone; return the chunks whose headers must be read."""
    for path in [p for p in cache if p not in versions]:
        del cache[path]
    todo = {}
    for path, key in keys.items():
        entry = cache.get(path)
        if entry is not None and entry[0] == versions[path]:
            out.chunks[key] = entry[1]
            out.paths[key] = path
        else:
            todo[path] = key
    return todo


def _read_records(backend, access_keys: list[str], out: Scan, progress=None) -> None:
    rec_paths = []
    for path in access_keys:
        (rec_paths if _ACCESS_RE.fullmatch(path) else out.strays).append(path)
    for path, data in fetched(backend, rec_paths, None, progress):
        try:
            rec = AccessRecord.decode(data)
        except (ValueError, KeyError, TypeError):
            out.corrupt[path] = "unreadable access record"
            continue
        if access_path(rec.key, rec.traffic_class) != path:
            out.corrupt[path] = "access record does not match its path"
            continue
        out.records[path] = rec


def scan_records(backend) -> dict[str, AccessRecord]:
    """Every valid access record, read now (GC re-reads them just before deleting)."""
    out = Scan()
    _read_records(backend, backend.listing(ACCESS)[0], out)
    return out.records
