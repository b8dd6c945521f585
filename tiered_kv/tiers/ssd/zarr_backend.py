"""Backends over a zarr v3 Store: any store (:class:`ZarrBackend`) and a local directory (:class:`LocalBackend`).

A get_prefix through ``asyncio.gather(store.get(...))`` spends more time per chunk on thread
hand-offs between zarr's event loop and its thread pool than on the read itself. Stores that
implement zarr's ``SupportsSyncStore`` (LocalStore, MemoryStore) therefore take a synchronous
path: ``get_sync``/``set_sync`` in contiguous groups, one per I/O thread (``io_threads=1``: in
the caller's thread). Other stores (fsspec), whose requests take milliseconds, keep the async
path, where concurrency is what counts.

A local directory is known by the directory behind it, which buys listings that also see
obstacles, the age of ``.partial`` files, and repair. An obstacle (a directory where a chunk
file belongs, a file where a shard directory belongs) would fail every read and write of that
key forever: a read returns :data:`~tiered_kv.tiers.ssd.layout.NOT_A_FILE` (the tier removes it
as corrupt; :meth:`ZarrBackend._found`), a write it blocks removes it and retries once. On a
plain ``LocalStore`` reads go straight to ``os.open``/``os.read``, skipping ``get_sync``'s
pathlib and Buffer wrapping, which cost as much as the read itself on small warm chunks; writes
and deletes always go through the store, so publishing stays zarr's atomic temp-file-and-rename.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from zarr.abc.store import RangeByteRequest, Store, SupportsSyncStore
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from tiered_kv.tiers.ssd import layout

_OBSTACLE_ERRORS = (IsADirectoryError, NotADirectoryError, FileExistsError)
_NOT_ATTEMPTED = "not attempted after an earlier failure"


class ZarrBackend:
    """Any zarr v3 Store: the sync API when the store has it (and ``io_threads`` > 0), else async."""

    rename_free = False  # publishing a new name is cheaper than overwriting one (see usage.py)

    def __init__(self, store: Store, *, io_threads: int = 1, concurrency: int = layout.IO_CONCURRENCY,
                 on_repair: Callable[[str, str], None] | None = None) -> None:
        layout.check_io(io_threads, concurrency)
        self.store = store
        self.name = str(store)
        self.on_repair = on_repair or (lambda path, reason: None)
        self.concurrency = concurrency
        self.sync_path = io_threads > 0 and isinstance(store, SupportsSyncStore)
        self.threads = io_threads
        self._pool = ThreadPoolExecutor(io_threads, thread_name_prefix="ssd-io") if self.sync_path and io_threads > 1 else None
        self._proto = default_buffer_prototype()
        # Pack and write in small batches: the same few buffers are reused instead of holding
        # every packed chunk at once (fresh memory for 100+ MB costs page faults, not I/O).
        self.batch = max(8, 2 * io_threads)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _fan_out(self, n: int, work: Callable[[range], list]) -> list:
        """``work`` over ``range(n)``, split into one contiguous part per I/O thread."""
        if self._pool is None or n < 2 * self.threads:
            return work(range(n))
        step = -(-n // self.threads)
        return [x for part in self._pool.map(work, [range(i, min(n, i + step)) for i in range(0, n, step)])
                for x in part]

    def _fan_out_prefix(self, n: int, read_one: Callable[[int], bytes | None]) -> list[bytes]:
        """A prefix read over the I/O threads: each part reads up to its own end (:func:`_prefix`)
        and pads the rest with None, so every result stays at its path's position."""
        def work(idx: range) -> list:
            part = _prefix(_caught(read_one, i) for i in idx)
            return part + [None] * (len(idx) - len(part))

        return layout.raise_first(_prefix(self._fan_out(n, work)))

    def _each(self, op: str, args: list[tuple]) -> list:
        """``store.<op>(*a)`` for each ``a``: zarr's sync API over the I/O threads, else its async
        API under the concurrency bound; per item, the result or the exception."""
        if not self.sync_path:
            return sync(layout.bounded((getattr(self.store, op)(*a) for a in args), self.concurrency))
        call = getattr(self.store, f"{op}_sync")
        return self._fan_out(len(args), lambda idx: [_caught(lambda i: call(*args[i]), i) for i in idx])

    def _get(self, path: str, byte_range=None) -> bytes | None:
        """One object through zarr's sync API, as :meth:`_found` reads it."""
        try:
            got = self.store.get_sync(path, prototype=self._proto, byte_range=byte_range)
        except OSError as exc:
            got = exc
        return self._found(path, got)

    async def _aget(self, path: str) -> bytes | None:
        """One whole object through the store's async API, as :meth:`_found` reads it."""
        try:
            got = await self.store.get(path, prototype=self._proto)
        except OSError as exc:
            got = exc
        return self._found(path, got)

    def _found(self, path: str, got) -> bytes | None:
        """What one read of ``path`` found (``got``: a Buffer, bytes, None or the OSError raised):
        the bytes, None where nothing is, or NOT_A_FILE where a directory is (an obstacle, not a
        plain miss). zarr's LocalStore reads a directory as None, hence the ``is_dir`` look."""
        if type(got) is bytes:  # the common case first: this runs once per chunk read
            return got
        if isinstance(got, IsADirectoryError) or (got is None and self.is_dir(path)):
            return layout.NOT_A_FILE
        if got is None or isinstance(got, (FileNotFoundError, NotADirectoryError)):
            return None
        if isinstance(got, Exception):
            raise got
        return layout.as_bytes(got)  # a zarr Buffer

    # ------------------------------------------------------------------ the hot path

    def read_prefix(self, paths: Sequence[str]) -> list[bytes]:
        """Objects at ``paths`` in order, up to the first missing one (the rule: :func:`_prefix`)."""
        if not self.sync_path:
            return sync(self._aread_prefix(paths))
        return self._fan_out_prefix(len(paths), lambda i: self._get(paths[i]))

    async def _aread_prefix(self, paths: Sequence[str]) -> list[bytes]:
        """A sliding window of ``concurrency`` reads (:meth:`_aget`): that many workers take the next
        path in order; once a read ends the prefix (:func:`_prefix`), no read past it is started.
        (Workers, not a task per path: a miss on the first of thousands of paths costs nothing.)"""
        out: list = [None] * len(paths)
        stop, nxt = [len(paths)], [0]

        async def worker() -> None:
            while nxt[0] < stop[0]:
                i = nxt[0]
                nxt[0] += 1
                try:
                    out[i] = await self._aget(paths[i])
                except Exception as exc:  # noqa: BLE001 - raised if it is in the prefix
                    out[i] = exc
                if out[i] is None or _ends_prefix(out[i]):
                    stop[0] = min(stop[0], i + 1)

        await asyncio.gather(*(worker() for _ in range(min(self.concurrency, len(paths)))))
        return layout.raise_first(_prefix(out))

    def exists(self, paths: Sequence[str]) -> list[bool]:
        if not self.sync_path:
            return layout.raise_first(sync(layout.bounded((self.store.exists(p) for p in paths), self.concurrency)))
        one = RangeByteRequest(0, 1)
        return [self.store.get_sync(p, prototype=self._proto, byte_range=one) is not None for p in paths]

    def present_for_put(self, paths: Sequence[str]) -> list[bool]:
        """Which chunks a put can skip (here: every existing one)."""
        return self.exists(paths)

    def write(self, items: Sequence[tuple[str, bytes]], *, create: bool = False, verify=None) -> list:
        """Publish every object (atomically per object); per item, None or the exception.
        ``create``/``verify`` (put-if-absent) are for object stores: renaming over an existing
        chunk is just as safe, two writers of one key write the same KV."""
        res = self._each("set", [(p, layout.buffer(b)) for p, b in items])
        return [r if isinstance(r, Exception) else None for r in res]

    def write_stream(self, n: int, make: Callable[[int], tuple[str, bytes]], *, create: bool = False,
                     verify=None) -> tuple[list, list[int]]:
        """Write items ``make(0) .. make(n-1)``, built ``batch`` at a time; stop after a batch
        with a failure (the rest: "not attempted"). Returns (per-item results, sizes)."""
        res: list = [OSError(_NOT_ATTEMPTED)] * n
        sizes = [0] * n
        for lo in range(0, n, self.batch):
            items = [make(j) for j in range(lo, min(n, lo + self.batch))]
            sizes[lo:lo + len(items)] = [len(b) for _, b in items]
            res[lo:lo + len(items)] = self.write(items, create=create, verify=verify)
            del items
            if any(isinstance(r, Exception) for r in res[lo:lo + self.batch]):
                break
        return res, sizes

    def delete(self, paths: Sequence[str]) -> None:
        """Delete objects (a directory in an object's place too); one already gone is fine."""
        for r in self._each("delete", [(p,) for p in paths]):
            if isinstance(r, Exception) and not isinstance(r, FileNotFoundError):
                raise r

    # ------------------------------------------------------------------ whole-store scans

    def get_many(self, paths: list[str], byte_range=None, on_done: Callable[[int], None] | None = None
                 ) -> list[bytes | None | Exception]:
        """Objects (or their first bytes) at ``paths``: zarr's sync API when the store has it
        (no event-loop hand-off per object), else its async API under a concurrency bound."""
        if not isinstance(self.store, SupportsSyncStore):
            done = (lambda: on_done(1)) if on_done else None
            res = sync(layout.bounded((self.store.get(p, prototype=self._proto, byte_range=byte_range)
                                       for p in paths), on_done=done))
            return [r if r is None or isinstance(r, Exception) else layout.as_bytes(r) for r in res]
        out: list[bytes | None | Exception] = []
        for i in range(len(paths)):
            out.append(_caught(lambda i: self._get(paths[i], byte_range), i))
            if on_done is not None:
                on_done(1)
        return out

    def listing(self, prefix: str) -> tuple[list[str], dict[str, str]]:
        """Keys under ``prefix``, and obstacles found there (path -> reason; none here)."""
        return sync(layout.list_keys(self.store, prefix)), {}

    def versions(self, prefix: str) -> dict[str, str] | None:
        """``{path: version}`` from one listing where the store has versions (object stores)."""
        return None

    def size_of_prefix(self, prefix: str) -> int:
        try:
            return sync(self.store.getsize_prefix(prefix))
        except FileNotFoundError:
            return 0

    def removable(self, strays: list[str], grace: float) -> list[str]:
        """Strays to remove now (a store without mtimes cannot tell a live writer's: all)."""
        return list(strays)

    def is_dir(self, path: str) -> bool:
        """True where a directory sits at an object's path (only a local directory can have one)."""
        return False

    def has_chunks(self) -> bool:
        async def any_chunk() -> bool:
            async for _ in self.store.list_prefix(layout.CHUNKS):
                return True
            return False

        try:
            return sync(any_chunk())
        except FileNotFoundError:
            return False

    def precreate_shards(self) -> None:
        """Create the shard directories now (only a local directory has them)."""


class LocalBackend(ZarrBackend):
    """A zarr store over a local directory ``root``: a LocalStore, or one behind a wrapper that
    keeps keys (:func:`~.backend._local_root`). Only a plain LocalStore's chunks are read straight
    from their files (``direct``): a wrapper's own reads (a delay, a log, an injected fault) are
    what it is there for, so they go through it."""

    def __init__(self, store: Store, root: Path, **kw) -> None:
        super().__init__(store, **kw)
        from zarr.storage import LocalStore

        self.root = root
        self.name = str(root)
        self.direct = self.sync_path and type(store) is LocalStore

    def read_prefix(self, paths: Sequence[str]) -> list[bytes]:
        if not self.direct:
            return super().read_prefix(paths)
        root = str(self.root) + os.sep
        full = [root + p for p in paths]
        return self._fan_out_prefix(len(paths), lambda i: self._found(paths[i], _read_file(full[i])))

    def exists(self, paths: Sequence[str]) -> list[bool]:
        if not self.direct:  # a wrapper's own look (its fault, delay or log), as for reads
            return super().exists(paths)
        root = str(self.root)
        return [os.path.isfile(os.path.join(root, p)) for p in paths]

    def write(self, items: Sequence[tuple[str, bytes]], *, create: bool = False, verify=None) -> list:
        """As any store; a write that an obstacle blocks removes the obstacle and is tried once more."""
        res = super().write(items)
        blocked = [i for i, r in enumerate(res) if isinstance(r, _OBSTACLE_ERRORS)]
        if any([self._remove_obstacles(items[i][0]) for i in blocked]):
            for i, r in zip(blocked, super().write([items[i] for i in blocked]), strict=True):
                res[i] = r
        return res

    def _remove_obstacles(self, path: str) -> bool:
        removed = False
        parts = path.split("/")
        for depth in range(1, len(parts)):  # ancestors that should be directories
            anc = "/".join(parts[:depth])
            full = os.path.join(self.root, anc)
            if os.path.lexists(full) and not os.path.isdir(full):
                os.unlink(full)
                self.on_repair(anc, f"a file where directory {anc}/ should be; removed")
                removed = True
        full = os.path.join(self.root, path)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full, ignore_errors=True)
            self.on_repair(path, "a directory where an object file should be; removed")
            removed = True
        return removed

    def listing(self, prefix: str) -> tuple[list[str], dict[str, str]]:
        """Keys of the files under ``root/prefix`` and the obstacles found there (path -> reason;
        a file at ``chunks`` itself is one). One ``os.scandir`` per directory (faster than zarr's
        ``rglob`` listing, which also cannot see an empty directory).
        """
        name = prefix.rstrip("/")
        files: list[str] = []
        obstacles: dict[str, str] = {}
        try:
            entries = list(os.scandir(self.root / name))
        except FileNotFoundError:
            return files, obstacles
        except NotADirectoryError:
            return files, {name: f"a file where directory {name}/ should be"}
        for e in entries:
            key = f"{prefix}{e.name}"
            is_shard = len(e.name) == 1 and e.name in layout.SHARDS
            if not e.is_dir(follow_symlinks=False):
                if is_shard:
                    obstacles[key] = f"a file where shard directory {key}/ should be"
                else:
                    files.append(key)
                continue
            if not is_shard:  # a foreign directory: its files are strays
                files += [p.relative_to(self.root).as_posix() for p in Path(e.path).rglob("*") if p.is_file()]
                continue
            for f in os.scandir(e.path):
                if f.is_dir(follow_symlinks=False):
                    obstacles[f"{key}/{f.name}"] = "a directory where an object file should be"
                else:
                    files.append(f"{key}/{f.name}")
        return files, obstacles

    def size_of_prefix(self, prefix: str) -> int:
        try:
            return sum(e.stat(follow_symlinks=False).st_size for e in os.scandir(self.root / prefix)
                       if e.is_file(follow_symlinks=False))
        except (FileNotFoundError, NotADirectoryError):
            return 0

    def removable(self, strays: list[str], grace: float) -> list[str]:
        """Only a ``.partial`` file may belong to a live writer (zarr's LocalStore writes
        ``<key>.<uuid>.partial`` then renames it): it stays until it is ``grace`` seconds old.
        Any other stray name can never become valid and goes at once."""
        now = time.time()
        out = []
        for path in strays:
            if grace > 0 and path.endswith(".partial"):
                try:
                    if now - (self.root / path).stat().st_mtime < grace:
                        continue
                except FileNotFoundError:
                    continue
            out.append(path)
        return out

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(os.path.join(self.root, path))

    def has_chunks(self) -> bool:
        return any((self.root / layout.CHUNKS / h).is_dir() for h in layout.SHARDS)

    def precreate_shards(self) -> None:
        """Create the 16 ``chunks/<h>`` and ``access/<h>`` directories now (LocalStore makes one
        on the first write into it, a mkdir that costs about as much as writing a chunk)."""
        for prefix in (layout.CHUNKS, layout.ACCESS):
            for h in layout.SHARDS:
                os.makedirs(self.root / prefix / h, exist_ok=True)


def _prefix(found: Iterable[bytes | None | Exception]) -> list:
    """What a prefix read returns of ``found`` (the objects at its paths, in order): up to the
    first None, and through the first NOT_A_FILE (the tier removes it) or the first read error
    (the caller raises it); nothing after is read. So an error on a path past a miss is never
    the caller's, whichever read path (one thread, a pool of them, zarr's async API) met it."""
    out = []
    for data in found:
        if data is None:
            break
        out.append(data)
        if _ends_prefix(data):
            break
    return out


def _ends_prefix(data) -> bool:
    """A read that is the last of its prefix though it found something: a directory, an error."""
    return data is layout.NOT_A_FILE or isinstance(data, Exception)


def _caught(call: Callable[[int], object], i: int):
    """``call(i)``, or the exception it raised (the caller decides: ENOSPC warns, a prefix read
    raises one that is in its prefix)."""
    try:
        return call(i)
    except Exception as exc:  # noqa: BLE001 - returned to the caller, which decides
        return exc


def _read_file(path: str) -> bytes | OSError:
    """Whole file as bytes, or the OSError that stopped the read (for ``_found``): one open,
    fstat, read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        return exc
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):  # (os.open opens a directory read-only without an error)
            return IsADirectoryError(path)
        # Published chunks are immutable (atomic rename), so one read of st_size bytes is the
        # whole object; a short read would fail the length and CRC checks like any truncation.
        return os.read(fd, st.st_size)
    finally:
        os.close(fd)
