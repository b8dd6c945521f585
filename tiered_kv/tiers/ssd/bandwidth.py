"""Read and write bandwidth limits of the SSD tier: token buckets shared per store and process group.

An experiment knob, not a production throttle, so a wrapper (:class:`PacedBackend`) around any
backend: ``SSDConfig(read_bandwidth="2GiB/s")`` emulates a client whose link to the store
carries 2 GiB/s, so a benchmark on a laptop can ask what a 40 GiB/s client, or a congested
one, would see. Every tier of one *process group* (``os.getpgrp()``: a command and the workers
it starts) on the same store (same path or URL) shares one bucket per direction, as the
engines of one machine share its NIC; another limit on that store is an error, not a silent
second link. ``link_bandwidth=`` is one bucket for reads and writes together (a half-duplex
link, the assumption of :func:`tiered_kv.sim.cluster.latency.simulate_queue`'s one queue).

The bucket is debt-based: a transfer of ``n`` bytes takes its tokens at once, even into debt,
and the caller sleeps until the debt is repaid at ``rate`` bytes per second. So a transfer
larger than the burst still passes, throughput over any window longer than ``burst / rate`` is
at most ``rate``, and callers queue fairly by arrival. Waits use the monotonic wall clock
(``CLOCK_MONOTONIC``, one clock for every process of the machine, so the times kept in the shared
file compare across processes): it is a link, not a simulated one.

Between processes, the state (rate, burst, tokens, time: 32 bytes) is a file under ``/dev/shm``
(else the temp dir) named by the process group, store and direction, updated under an
exclusive ``flock``. Each user holds a shared ``flock`` on a companion ``.users`` file, so a
file nobody holds is stale and the next opener starts it afresh at its own rate; the last user
to close removes both (a process killed outright leaves them, harmless, reset by the next
opener). Within a process every tier gets the same bucket object; without ``fcntl`` (not
POSIX) the bucket is per process.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import re
import struct
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence

from tiered_kv.units import parse_bytes

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: buckets are per process
    fcntl = None

#: Seconds of traffic the bucket holds when full (how far a transfer may start early).
BURST_SECONDS = 0.05
_STATE = struct.Struct("<4d")  # rate, burst, tokens, time (monotonic seconds)

_BUCKETS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_REGISTRY_LOCK = threading.Lock()


def parse_rate(value, *, name: str) -> float | None:
    """Bytes per second from ``2e9``, ``"2GiB/s"`` or ``"500MB"`` (per second implied); None: no limit."""
    if value is None:
        return None
    if isinstance(value, str):
        value = re.sub(r"\s*/\s*s(ec)?$", "", value.strip(), flags=re.IGNORECASE)
    rate = float(parse_bytes(value, name=name))
    if not rate > 0:
        raise ValueError(f"{name}: must be a bandwidth > 0 bytes/s (e.g. '2GiB/s'), got {value!r}")
    return rate


class TokenBucket:
    """``rate`` bytes/s with a burst of ``burst`` bytes; thread-safe, debt-based (see module)."""

    def __init__(self, rate: float, burst: float | None = None) -> None:
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else max(self.rate * BURST_SECONDS, 1.0))
        self._tokens = self.burst
        self._t = time.monotonic()
        self._lock = threading.Lock()
        self.waited_s = 0.0
        self.holders = 0  # tiers of this process using it (see release)

    def _update(self, nbytes: int, take: bool) -> float:
        """Refill to now; take ``nbytes`` when ``take``; the seconds ``nbytes`` waits (caller holds the lock)."""
        now = time.monotonic()
        tokens = min(self.burst, self._tokens + max(0.0, now - self._t) * self.rate)
        delay = max(0.0, (nbytes - tokens) / self.rate)
        if take:
            self._tokens, self._t = tokens - nbytes, now
        return delay

    def reserve(self, nbytes: int) -> float:
        """Take ``nbytes`` now; return the seconds the caller must wait before they count as sent."""
        with self._lock:
            delay = self._update(nbytes, True)
        self.waited_s += delay
        return delay

    def predict(self, nbytes: int) -> float:
        """Seconds a transfer of ``nbytes`` starting now would wait (the link's queue plus its own
        time on it beyond the burst); takes nothing. Admission control reads this."""
        with self._lock:
            return self._update(nbytes, False)

    def wait(self, nbytes: int) -> None:
        delay = self.reserve(nbytes)
        if delay > 0:
            time.sleep(delay)


class GroupTokenBucket(TokenBucket):
    """A :class:`TokenBucket` whose state every process of one process group shares (see module)."""

    def __init__(self, path: str, rate: float, *, name: str, what: str) -> None:
        super().__init__(rate)
        self.path = path
        self._name, self._what = name, what
        self._open()
        self._finalizer = weakref.finalize(self, _release, path, self._fds)

    def _open(self) -> None:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            with contextlib.suppress(FileNotFoundError):  # (its last user may have removed it meanwhile)
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    break
            os.close(fd)
        with contextlib.ExitStack() as undo:  # a failure closes what was opened, which also unlocks
            undo.callback(os.close, fd)
            users = os.open(self.path + ".users", os.O_RDWR | os.O_CREAT, 0o600)
            undo.callback(os.close, users)
            try:
                fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fresh = True  # nobody holds it: new, or left by processes that are gone
            except BlockingIOError:
                fresh = False
            if os.fstat(fd).st_size < _STATE.size:
                os.ftruncate(fd, _STATE.size)
                fresh = True
            state = mmap.mmap(fd, _STATE.size)
            undo.callback(state.close)
            if fresh:
                state[:] = _STATE.pack(self.rate, self.burst, self.burst, time.monotonic())
            elif (have := _STATE.unpack(state[:])[0]) != self.rate:
                raise _clash(self._name, "process group", self._what, have, self.rate)
            fcntl.flock(users, fcntl.LOCK_SH)  # (a downgrade when fresh: we hold the state lock)
            undo.pop_all()
        fcntl.flock(fd, fcntl.LOCK_UN)
        self._fd, self._state, self._pid = fd, state, os.getpid()
        self._fds = [fd, users]

    def _update(self, nbytes: int, take: bool) -> float:
        if self._pid != os.getpid():  # a forked child: its own open files (flock is per open file)
            self._finalizer.detach()
            inherited, old_state = self._fds, self._state
            self._open()
            old_state.close()
            for f in inherited:
                os.close(f)
            self._finalizer = weakref.finalize(self, _release, self.path, self._fds)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            rate, burst, tokens, t = _STATE.unpack(self._state[:])
            self._tokens, self._t = tokens, t
            delay = super()._update(nbytes, take)
            if take:
                self._state[:] = _STATE.pack(rate, burst, self._tokens, self._t)
            return delay
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)


def _release(path: str, fds: list[int]) -> None:
    """Close this process's files of a group bucket; the last user removes them."""
    fd, users = fds
    with contextlib.suppress(OSError):  # (BlockingIOError: another process still uses them)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.close(users)
        probe = os.open(path + ".users", os.O_RDWR)
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            for p in (path, path + ".users"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)
        finally:
            os.close(probe)
    with contextlib.suppress(OSError):
        os.close(fd)


def _clash(name: str, who: str, what: str, have: float, asked: float) -> ValueError:
    return ValueError(f"{name}: this {who} already limits {what} to {have:.4g} bytes/s; every tier on one store "
                      f"shares that limit (asked for {asked:.4g})")


def group_state_path(store_id: str, direction: str) -> str:
    """The file that holds this process group's bucket for ``(store_id, direction)``."""
    shm = "/dev/shm"
    where = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else tempfile.gettempdir()
    digest = hashlib.sha256(f"{store_id}\0{direction}".encode()).hexdigest()[:20]
    return os.path.join(where, f"tiered-kv-bw-{os.getpgrp()}-{digest}")


def shared_bucket(store_id: str, direction: str, rate: float | None) -> TokenBucket | None:
    """The process group's bucket for ``(store_id, direction)``, created at ``rate`` on first use.

    ``direction``: ``"read"``, ``"write"`` or ``"link"`` (both). A second tier asking for another
    rate on the same store gets a ValueError naming its setting (``<direction>_bandwidth``).
    """
    if rate is None:
        return None
    name = f"{direction}_bandwidth"
    what = f"{direction}s of {store_id}" if direction != "link" else f"reads and writes of {store_id}"
    with _REGISTRY_LOCK:
        bucket = _BUCKETS.get((store_id, direction))
        if bucket is None:
            if fcntl is not None:
                bucket = GroupTokenBucket(group_state_path(store_id, direction), rate, name=name, what=what)
            else:
                bucket = TokenBucket(rate)
            _BUCKETS[(store_id, direction)] = bucket
        elif bucket.rate != rate:
            raise _clash(name, "process", what, bucket.rate, rate)
        bucket.holders += 1
        return bucket


def release(bucket: TokenBucket | None) -> None:
    """A tier closing: when it was the last of this process to use ``bucket``, let go of its
    shared state now (the last process of the group to do so removes the files)."""
    if bucket is None:
        return
    with _REGISTRY_LOCK:
        bucket.holders -= 1
        if bucket.holders > 0:
            return
        for key, b in list(_BUCKETS.items()):
            if b is bucket:
                del _BUCKETS[key]
    finalizer = getattr(bucket, "_finalizer", None)
    if finalizer is not None:
        finalizer()


class PacedBackend:
    """A backend whose reads and writes pass through token buckets (either may be None).

    Reads are paced by the bytes a ``read_prefix`` returned, writes by the bytes of each object
    before it is handed to the backend; scans and GC are not paced (they are the store's own
    maintenance, not a client's traffic). Every other call goes to the wrapped backend.
    """

    def __init__(self, inner, read_limit: TokenBucket | None, write_limit: TokenBucket | None) -> None:
        self.inner = inner
        self.read_limit = read_limit
        self.write_limit = write_limit

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def read_prefix(self, paths: Sequence[str]) -> list[bytes]:
        out = self.inner.read_prefix(paths)
        if self.read_limit is not None and out:
            self.read_limit.wait(sum(len(b) for b in out))
        return out

    def write(self, items: Sequence[tuple[str, bytes]], *, create: bool = False, verify=None) -> list:
        if self.write_limit is not None:
            self.write_limit.wait(sum(len(b) for _, b in items))
        return self.inner.write(items, create=create, verify=verify)

    def write_stream(self, n: int, make: Callable[[int], tuple[str, bytes]], *, create: bool = False,
                     verify=None) -> tuple[list, list[int]]:
        limit = self.write_limit

        def paced(j: int) -> tuple[str, bytes]:
            item = make(j)
            if limit is not None:
                limit.wait(len(item[1]))
            return item

        return self.inner.write_stream(n, paced, create=create, verify=verify)

    def close(self) -> None:
        self.inner.close()
        for bucket in {id(b): b for b in (self.read_limit, self.write_limit)}.values():  # (a link: one bucket)
            release(bucket)
        self.read_limit = self.write_limit = None


def paced(backend, read_bandwidth: float | None, write_bandwidth: float | None, link_bandwidth: float | None):
    """``backend`` behind the process group's buckets for its store, or itself when unlimited.

    Rates are bytes/s (:func:`parse_rate`); ``link_bandwidth`` is one bucket for both directions.
    """
    if link_bandwidth is not None:
        read = write = shared_bucket(backend.name, "link", link_bandwidth)
    else:
        read = shared_bucket(backend.name, "read", read_bandwidth)
        write = shared_bucket(backend.name, "write", write_bandwidth)
    return backend if read is None and write is None else PacedBackend(backend, read, write)
