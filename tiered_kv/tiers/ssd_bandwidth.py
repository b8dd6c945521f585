"""Read and write bandwidth limits of the SSD tier: token buckets shared per store and process.

An experiment knob, not a production throttle: ``SSDTier(..., read_bandwidth="2GiB/s")``
emulates a client whose link to the store carries 2 GiB/s, so a benchmark on a laptop can ask
what a DeepSeek-like 40 GiB/s client, or a congested one, would see. Every ``SSDTier`` of one
process that opens the same store (same path or URL) with a limit shares one bucket per
direction, as the engines of one machine share its NIC; opening the same store with a
different limit is an error rather than a silent second link.

The bucket is debt-based: a transfer of ``n`` bytes takes its tokens at once, even into debt,
and the caller then sleeps until the debt is paid back at ``rate`` bytes per second. So a
single transfer larger than the burst still passes (after its time on the link), throughput
over any window longer than ``burst / rate`` is at most ``rate``, and concurrent callers queue
fairly by arrival. Waits use the monotonic wall clock: it is a link, not a simulated one.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import weakref

from tiered_kv.units import parse_bytes

#: Seconds of traffic the bucket holds when full (how far a transfer may start early).
BURST_SECONDS = 0.05

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

    def reserve(self, nbytes: int) -> float:
        """Take ``nbytes`` now; return the seconds the caller must wait before they count as sent."""
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._t) * self.rate)
            self._t = now
            self._tokens -= nbytes
            delay = max(0.0, -self._tokens / self.rate)
            self.waited_s += delay
            return delay

    def wait(self, nbytes: int) -> None:
        delay = self.reserve(nbytes)
        if delay > 0:
            time.sleep(delay)

    async def wait_async(self, nbytes: int) -> None:
        delay = self.reserve(nbytes)
        if delay > 0:
            await asyncio.sleep(delay)


def shared_bucket(store_id: str, direction: str, rate: float | None, *, name: str) -> TokenBucket | None:
    """The process's bucket for ``(store_id, direction)``, created at ``rate`` on first use.

    The bucket lives while some tier holds it. A second tier asking for another rate on the
    same store gets a ValueError naming ``name``.
    """
    if rate is None:
        return None
    with _REGISTRY_LOCK:
        bucket = _BUCKETS.get((store_id, direction))
        if bucket is None:
            bucket = TokenBucket(rate)
            _BUCKETS[(store_id, direction)] = bucket
        elif bucket.rate != rate:
            raise ValueError(f"{name}: this process already limits {direction}s of {store_id} to "
                             f"{bucket.rate:.4g} bytes/s; every tier on one store shares that limit "
                             f"(asked for {rate:.4g})")
        return bucket
