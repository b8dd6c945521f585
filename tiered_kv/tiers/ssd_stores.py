"""Where an SSD-tier store comes from, and which I/O class drives it.

A store is named by a local path, a URL (``s3://``, ``gs://``, ``az://`` through obstore;
``memory://`` and other fsspec URLs through zarr's FsspecStore), a zarr v3 ``Store`` or an
obstore store object; ``None`` is the default directory (``$TIERED_KV_SSD`` or
``~/.cache/tiered-kv/ssd``). Whatever it is, the tier sees a zarr v3 Store with one layout
(:mod:`tiered_kv.tiers.ssd_layout`), driven by :class:`tiered_kv.tiers.ssd_io.ChunkIO`, or by
:class:`tiered_kv.tiers.ssd_object.ObjectChunkIO` for object stores.

This module sits above the layout, the I/O classes and the object-store backend, so none of
them needs to import another lazily to open a store.
"""

from __future__ import annotations

import os
from pathlib import Path

from zarr.abc.store import Store

from tiered_kv.tiers import ssd_object
from tiered_kv.tiers.ssd_io import ChunkIO
from tiered_kv.tiers.ssd_layout import default_store_path, local_root


def open_store(store: Store | str | os.PathLike | None) -> Store:
    """A zarr v3 Store from a Store, a local path, a URL, an obstore store, or None (the default dir).

    ``s3://``, ``gs://`` and ``az://`` URLs (and obstore store objects) open through obstore
    (:func:`tiered_kv.tiers.ssd_object.open_object_store`); other URLs through fsspec.
    """
    from zarr.storage import LocalStore

    if store is None:
        store = default_store_path()
    if isinstance(store, str) and "://" in store and not store.startswith("file://"):
        if ssd_object.is_object_url(store):
            return ssd_object.open_object_store(store)
        from zarr.storage import FsspecStore  # memory://, ... (needs the fsspec backend)

        return FsspecStore.from_url(store)
    if isinstance(store, str) and store.startswith("file://"):
        store = store[len("file://"):]
    if isinstance(store, (str, os.PathLike)):
        path = Path(store).expanduser()
        if path.exists() and not path.is_dir():
            raise ValueError(f"store: {path} exists and is not a directory")
        path.mkdir(parents=True, exist_ok=True)
        return LocalStore(path)
    if isinstance(store, Store):
        return store
    if ssd_object.is_obstore_store(store):
        return ssd_object.open_object_store(store)
    raise ValueError(f"store: must be a path, a URL, a zarr v3 Store or an obstore store, got {type(store).__name__}")


def describe(store: Store) -> str:
    """The store as a user would name it (a path or a URL), for messages."""
    root = local_root(store)
    if root is not None:
        return str(root)
    return ssd_object.store_url(store) or str(store)


def make_io(store: Store, **kw):
    """The I/O class for ``store``: obstore's for object stores, :class:`ChunkIO` otherwise."""
    if ssd_object.is_object_store(store):
        kw.pop("io_threads", None)
        return ssd_object.ObjectChunkIO(store, **kw)
    return ChunkIO(store, **kw)
