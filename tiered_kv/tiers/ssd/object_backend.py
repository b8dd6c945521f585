"""The SSD tier's backend for object storage (S3 and S3-compatible services, GCS, Azure) through obstore.

The store is wrapped in zarr's ``ObjectStore``, so the layout, the scans and ``tiered-kv store``
run on it unchanged (byte for byte the same objects as on a local directory); the hot path
talks to obstore directly, where zarr adds nothing but an event-loop hop and a copy.

Crash safety without rename: a chunk is one object written by one PUT, which S3 makes visible
whole or not at all, so a writer killed mid-put leaves nothing. Concurrent writers of one key
use put-if-absent (``If-None-Match: *``); the loser reads the existing object and takes it as
success only if it passes the checks a reader applies, else overwrites it (it was damaged). A
service that ignores ``If-None-Match`` makes this last writer wins, still safe: both wrote the
KV of the same prefix.

Recency as on a local directory (:mod:`.layout`): one tiny record per prefix tail, overwritten
in place off the read path. Rejected: object metadata (immutable on S3, so a touch is a
server-side copy racing GC, and LIST does not return it) and per-writer access logs (S3 has no
append). Two readers of one tail racing can leave the earlier time: the prefix then looks older
by at most the gap between them.

Errors: an unreachable endpoint, a missing bucket or rejected credentials raise
:class:`StoreAccessError` (a ValueError: the CLI prints one line) within ``ACCESS_TIMEOUT_S``;
URL-opened stores get short connect timeouts and few retries (obstore's defaults retry for 3 min).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Sequence
from datetime import timedelta

from zarr.core.sync import sync

from tiered_kv.tiers.ssd import layout
from tiered_kv.tiers.ssd.zarr_backend import _NOT_ATTEMPTED, ZarrBackend

OBJECT_SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "azure", "abfs", "abfss")
ACCESS_TIMEOUT_S = 20.0
CLIENT_OPTIONS = {"connect_timeout": "5s", "timeout": "60s"}
RETRY_CONFIG = {"max_retries": 3, "retry_timeout": timedelta(seconds=15)}


class StoreAccessError(ValueError):
    """The store cannot be used: unreachable, no such bucket, or credentials rejected."""


def is_object_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in OBJECT_SCHEMES


def open_object_store(store):
    """zarr ``ObjectStore`` over an obstore store or URL (``s3://bucket/prefix``).

    URLs take their configuration from the environment as obstore reads it (``AWS_ENDPOINT_URL``,
    ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ...); an ``http://``
    endpoint is allowed when ``AWS_ENDPOINT_URL`` is one (a local MinIO or moto).
    """
    try:
        import obstore  # noqa: F401
    except ImportError:  # pragma: no cover - obstore is in the dev extra
        raise ValueError("store: object-store URLs need obstore (pip install obstore)") from None
    from zarr.storage import ObjectStore

    if isinstance(store, str):
        from obstore.store import from_url

        options = dict(CLIENT_OPTIONS)
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
        if endpoint.startswith("http://"):
            options["allow_http"] = True
        scheme, rest = store.split("://", 1)
        url = f"s3://{rest}" if scheme.lower() == "s3a" else store
        try:
            store = from_url(url, client_options=options, retry_config=RETRY_CONFIG)
        except Exception as exc:  # noqa: BLE001 - obstore raises several types for bad URLs
            raise ValueError(f"store: cannot open {url}: {_first_line(exc)}") from None
    return ObjectStore(store)


def store_url(store) -> str:
    """``s3://bucket/prefix`` (and the endpoint, when one is set) of a zarr ``ObjectStore``."""
    inner = store.store
    cfg = getattr(inner, "config", {}) or {}
    prefix = (getattr(inner, "prefix", None) or "").strip("/")
    name = type(inner).__name__
    if "bucket" in cfg:
        scheme = {"S3Store": "s3", "GCSStore": "gs"}.get(name, "s3")
        url = f"{scheme}://{cfg['bucket']}/{prefix}".rstrip("/")
    elif "container_name" in cfg:
        url = f"az://{cfg['container_name']}/{prefix}".rstrip("/")
    else:
        return f"obstore {name}" + (f" {prefix}" if prefix else "")
    endpoint = _configured_endpoint(store)
    return f"{url} (endpoint {endpoint})" if endpoint else url


def _configured_endpoint(store) -> str | None:
    """The endpoint a store talks to: its config, else the environment obstore read it from."""
    cfg = getattr(store.store, "config", {}) or {}
    found = cfg.get("endpoint") or cfg.get("aws_endpoint")
    if not found and type(store.store).__name__ == "S3Store":
        found = (os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
                 or os.environ.get("AWS_ENDPOINT"))
    return found or None


def _first_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def access_error(store, exc: BaseException, timeout: float) -> StoreAccessError:
    """One line naming the store and what failed, from an obstore (or timeout) exception."""
    url = store_url(store)
    cfg = getattr(store.store, "config", {}) or {}
    text, where = str(exc), _configured_endpoint(store) or "the service's default endpoint"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return StoreAccessError(f"store {url}: no answer from {where} within {timeout:g} s")
    if "NoSuchBucket" in text:
        return StoreAccessError(f"store {url}: bucket {cfg.get('bucket', '?')!r} does not exist at {where}")
    codes = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "ExpiredToken", "InvalidToken",
             "403 Forbidden", "401 Unauthorized")
    code = next((c for c in codes if c in text), None)  # the service's own code names it best
    if code is None and type(exc).__name__ in ("PermissionDeniedError", "UnauthenticatedError"):
        code = type(exc).__name__
    if code is not None:
        return StoreAccessError(f"store {url}: credentials rejected by {where} ({code}); "
                                "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the store's credentials")
    if "error sending request" in text or "onnection refused" in text or "dns error" in text:
        return StoreAccessError(f"store {url}: cannot connect to {where} (connection failed)")
    return StoreAccessError(f"store {url}: {type(exc).__name__}: {_first_line(exc)}")


class ObjectBackend(ZarrBackend):
    """An object store: obstore's requests on the hot path, put-if-absent, bulk deletes, ETags.

    Scans (listings, header reads) go through the zarr ``ObjectStore`` it inherits."""

    rename_free = True  # one PUT replaces an object atomically and cheaply: usage keeps one name

    def __init__(self, store, *, concurrency: int = layout.IO_CONCURRENCY,
                 on_repair: Callable[[str, str], None] | None = None) -> None:
        super().__init__(store, io_threads=0, concurrency=concurrency, on_repair=on_repair)
        self.obs_store = store.store
        self.name = store_url(store)

    def check_access(self) -> None:
        """List the store's prefix once; raise :class:`StoreAccessError` if that fails or hangs."""
        import obstore as obs

        async def probe() -> None:
            await asyncio.wait_for(obs.list_with_delimiter_async(self.obs_store), ACCESS_TIMEOUT_S)

        try:
            sync(probe())
        except Exception as exc:  # noqa: BLE001 - classified into one line
            raise access_error(self.store, exc, ACCESS_TIMEOUT_S) from None

    def versions(self, prefix: str) -> dict[str, str]:
        """``{path: version}`` (ETag, else size and mtime) of the objects under ``prefix``, one listing."""
        import obstore as obs

        async def listing() -> list[dict]:
            return [m async for batch in obs.list(self.obs_store, prefix=prefix) for m in batch]

        return {m["path"]: m.get("e_tag") or f"{m['size']}@{m['last_modified']}" for m in sync(listing())}

    # ------------------------------------------------------------------ reads

    async def _aget(self, path: str) -> bytes | None:
        """One whole object by one GET (the prefix read's, and put-if-absent's look at a loser's key)."""
        import obstore as obs

        try:
            return bytes(await (await obs.get_async(self.obs_store, path)).bytes_async())
        except FileNotFoundError:
            return None

    def present_for_put(self, paths: Sequence[str]) -> list[bool]:
        """Which chunks a put can skip. One HEAD of the last chunk first: if it is missing, the
        put writes every chunk with put-if-absent (a present one costs its upload and one GET),
        instead of a HEAD per chunk (a whole extra round of requests for the usual new suffix)."""
        if not paths:
            return []
        if not self.exists([paths[-1]])[0]:
            return [False] * len(paths)
        return self.exists(paths)

    # ------------------------------------------------------------------ writes

    def write(self, items: Sequence[tuple[str, bytes]], *, create: bool = False, verify=None) -> list:
        """PUT every object; per item None, :data:`~tiered_kv.tiers.ssd.layout.ALREADY_PRESENT` or the
        exception. ``create``: put-if-absent; an existing object is kept if ``verify(path, data)``."""
        items = list(items)
        res, _ = self.write_stream(len(items), items.__getitem__, create=create, verify=verify)
        return res

    def write_stream(self, n: int, make: Callable[[int], tuple[str, bytes]], *, create: bool = False,
                     verify=None) -> tuple[list, list[int]]:
        """Build item ``j`` with ``make(j)`` just before its PUT (at most ``concurrency`` built
        and in flight); after a failure nothing further is started. Returns (results, sizes)."""
        return sync(self._write_stream(n, make, create, verify))

    async def _write_stream(self, n, make, create, verify) -> tuple[list, list[int]]:
        res: list = [OSError(_NOT_ATTEMPTED)] * n
        sizes = [0] * n
        sem = asyncio.Semaphore(self.concurrency)
        failed = [False]
        tasks = []

        async def one(j: int, path: str, data: bytes) -> None:
            try:
                res[j] = await self._put(path, data, create, verify)
                if isinstance(res[j], Exception):
                    failed[0] = True
            finally:
                sem.release()

        try:
            for j in range(n):
                await sem.acquire()  # (after a failure or a raise nothing acquires it again)
                if failed[0]:
                    break
                path, data = make(j)
                sizes[j] = len(data)
                tasks.append(asyncio.ensure_future(one(j, path, data)))
        finally:
            await asyncio.gather(*tasks)
        return res, sizes

    async def _put(self, path: str, data: bytes, create: bool, verify):
        import obstore as obs
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            try:
                await obs.put_async(self.obs_store, path, data, mode="create" if create else "overwrite",
                                    use_multipart=False)
                return None
            except (AlreadyExistsError, PreconditionError):  # (only put-if-absent: the key is taken)
                pass
            existing = await self._aget(path)  # (None: deleted by GC since; try once more)
            if existing is not None and (verify is None or verify(path, existing)):
                return layout.ALREADY_PRESENT
            await obs.put_async(self.obs_store, path, data, use_multipart=False)
            if existing is not None:
                self.on_repair(path, "existing object failed its checks; replaced")
            return None
        except Exception as exc:  # noqa: BLE001 - the caller decides
            return exc

    def delete(self, paths: Sequence[str]) -> None:
        """Bulk deletes (S3 DeleteObjects and the like: up to 1000 keys a request, one request
        after the other, in the order given); a key already gone is fine."""
        if paths:
            sync(_bulk_delete(self.obs_store, list(paths)))


async def _bulk_delete(obs_store, paths: list[str]) -> None:
    import obstore as obs

    for lo in range(0, len(paths), 1000):
        try:
            await obs.delete_async(obs_store, paths[lo:lo + 1000])
        except FileNotFoundError:  # stores without a bulk delete report a missing key
            for p in paths[lo:lo + 1000]:
                with contextlib.suppress(FileNotFoundError):
                    await obs.delete_async(obs_store, p)
