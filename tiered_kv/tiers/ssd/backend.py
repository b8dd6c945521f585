"""One interface to every store the SSD tier runs on, and the one place a store's kind is decided.

A store is named by a local path, a URL (``s3://``, ``gs://``, ``az://`` through obstore;
``memory://`` and other fsspec URLs through zarr's FsspecStore), a zarr v3 ``Store`` or an
obstore store object; ``None`` is the default directory (``$TIERED_KV_SSD`` or
``~/.cache/tiered-kv/ssd``). :func:`open_backend` turns it into a :class:`Backend` once, when
the tier (or ``tiered-kv store``) opens it; nothing downstream asks again what kind of store
it has: a local directory (:class:`~.zarr_backend.LocalBackend`), any other zarr store
(:class:`~.zarr_backend.ZarrBackend`) or an object store (:class:`~.object_backend.ObjectBackend`),
byte for byte the same objects on each (:mod:`.layout`). Optional behaviour wraps a backend
rather than living in it (bandwidth emulation: :class:`.bandwidth.PacedBackend`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from zarr.abc.store import Store

from tiered_kv.tiers.ssd import layout, object_backend
from tiered_kv.tiers.ssd.zarr_backend import LocalBackend, ZarrBackend


@runtime_checkable
class Backend(Protocol):
    """What the tier, its scans and its GC need from a store (results per path, in order; a
    write's: None, :data:`~.layout.ALREADY_PRESENT` or the exception that stopped it)."""

    store: Store  # the zarr view: group documents, and what other zarr clients open
    rename_free: bool  # overwriting one name is cheap and atomic (usage ledgers keep one name)
    name: str  # the store as a user would name it, for messages

    def read_prefix(self, paths: Sequence[str]) -> list[bytes]: ...
    def exists(self, paths: Sequence[str]) -> list[bool]: ...
    def present_for_put(self, paths: Sequence[str]) -> list[bool]: ...
    def write(self, items: Sequence[tuple[str, bytes]], *, create: bool = False, verify=None) -> list: ...
    def write_stream(self, n: int, make: Callable[[int], tuple[str, bytes]], *, create: bool = False,
                     verify=None) -> tuple[list, list[int]]: ...
    def delete(self, paths: Sequence[str]) -> None: ...
    def get_many(self, paths: list[str], byte_range=None, on_done: Callable[[int], None] | None = None
                 ) -> list[bytes | None | Exception]: ...
    def listing(self, prefix: str) -> tuple[list[str], dict[str, str]]: ...
    def versions(self, prefix: str) -> dict[str, str] | None: ...
    def size_of_prefix(self, prefix: str) -> int: ...
    def removable(self, strays: list[str], grace: float) -> list[str]: ...
    def has_chunks(self) -> bool: ...
    def precreate_shards(self) -> None: ...
    def close(self) -> None: ...


def open_backend(store: Store | str | os.PathLike | Backend | None, *, io_threads: int = 1,
                 concurrency: int = layout.IO_CONCURRENCY,
                 on_repair: Callable[[str, str], None] | None = None) -> Backend:
    """The backend for ``store`` (a Backend is returned as it is); ``io_threads``: see SSDConfig.

    Object stores are checked here: unreachable, no such bucket or rejected credentials raise
    :class:`~tiered_kv.tiers.ssd.object_backend.StoreAccessError`.
    """
    if isinstance(store, Backend):
        return store
    from zarr.storage import ObjectStore

    zstore = open_store(store)
    if isinstance(zstore, ObjectStore):
        backend = object_backend.ObjectBackend(zstore, concurrency=concurrency, on_repair=on_repair)
        backend.check_access()
        return backend
    root = _local_root(zstore)
    if root is not None:
        return LocalBackend(zstore, root, io_threads=io_threads, concurrency=concurrency, on_repair=on_repair)
    return ZarrBackend(zstore, io_threads=io_threads, concurrency=concurrency, on_repair=on_repair)


def _local_root(store: Store) -> Path | None:
    """The directory behind a zarr ``LocalStore``, also seen through wrappers that pass every key
    on unchanged: zarr's ``LoggingStore`` and ``LatencyStore`` (exactly: a subclass may map keys)
    and any class that says ``keeps_keys = True`` (the store suite's fault wrappers); else None.

    :class:`~.zarr_backend.LocalBackend` lists and repairs that directory itself, which is right
    only while each key is the file of that name. Any other store, another ``WrapperStore``
    included, opens as the generic :class:`~.zarr_backend.ZarrBackend`: correct through the
    store's own API, only slower and blind to obstacles (which only the directory shows).
    """
    from zarr.storage import LocalStore, LoggingStore

    testing = sys.modules.get("zarr.testing.store")  # LatencyStore's module imports pytest: only if loaded
    keeping = (LoggingStore, *((testing.LatencyStore,) if testing is not None else ()))
    while type(store) in keeping or getattr(type(store), "keeps_keys", False) is True:
        store = store._store
    return store.root if type(store) is LocalStore else None


def open_store(store: Store | str | os.PathLike | None) -> Store:
    """A zarr v3 Store from a Store, a local path, a URL, an obstore store, or None (the default dir)."""
    from zarr.storage import LocalStore

    if store is None:
        store = layout.default_store_path()
    if isinstance(store, str):
        store = store.removeprefix("file://")
        if "://" in store:
            if object_backend.is_object_url(store):
                return object_backend.open_object_store(store)
            from zarr.storage import FsspecStore  # memory://, ... (needs the fsspec backend)

            return FsspecStore.from_url(store)
    if isinstance(store, (str, os.PathLike)):
        path = Path(store).expanduser()
        if path.exists() and not path.is_dir():
            raise ValueError(f"store: {path} exists and is not a directory")
        path.mkdir(parents=True, exist_ok=True)
        return LocalStore(path)
    if isinstance(store, Store):
        return store
    if type(store).__module__.startswith("obstore"):
        return object_backend.open_object_store(store)
    raise ValueError(f"store: must be a path, a URL, a zarr v3 Store or an obstore store, got {type(store).__name__}")
