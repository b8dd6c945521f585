"""Host tier: per-machine window caches at block boundaries, LRU by bytes.

What it holds: for a prefix ending on a block boundary P, the sliding-window caches of the
encoder layers (and of the decoder layers, when the engine has them) that let a prefill
continue at P without replaying anything. These are a few MB per prefix at most (L layers x
(W-1) positions x K/V), cheap to keep in DRAM and pointless to share: a machine that lacks
them rebuilds them by bounded replay from tokens it already has. So this tier is never shared
between machines; each engine owns one.

Keyed by the chained prefix key of the block that ends at P (:func:`tiered_kv.keys.block_keys`),
so an entry can only ever be used for the exact prefix it was computed from. Evicts least
recently used entries until the bytes held fit ``capacity_bytes``; an entry larger than the
whole capacity is refused.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from tiered_kv.model import WindowState
from tiered_kv.tiers import capacity


@dataclass
class HostEntry:
    """Window caches at one block boundary ``end`` (= blocks * block_size tokens)."""

    encoder: WindowState
    decoder: WindowState | None = None

    @property
    def end(self) -> int:
        return self.encoder.end

    @property
    def nbytes(self) -> int:
        return self.encoder.nbytes + (self.decoder.nbytes if self.decoder is not None else 0)


class HostTier:
    """LRU-by-bytes map from a chained prefix key to a :class:`HostEntry`."""

    def __init__(self, capacity_bytes: int | float | str = "1GiB", name: str = "host0") -> None:
        self.capacity_bytes = capacity(capacity_bytes, tier="host")
        self.name = name
        self._entries: OrderedDict[bytes, HostEntry] = OrderedDict()
        self.used_bytes = 0
        self.stats = {"puts": 0, "refused": 0, "evictions": 0, "evicted_bytes": 0, "hits": 0, "misses": 0}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: bytes) -> bool:
        return key in self._entries

    def put(self, key: bytes, entry: HostEntry) -> bool:
        """Store (a copy of) ``entry`` under ``key``; returns False if it can never fit."""
        if not isinstance(key, (bytes, bytearray)):
            raise ValueError(f"host key: must be bytes, got {type(key).__name__}")
        size = entry.nbytes
        if size > self.capacity_bytes:
            self.stats["refused"] += 1
            return False
        old = self._entries.pop(bytes(key), None)
        if old is not None:
            self.used_bytes -= old.nbytes
        self._entries[bytes(key)] = HostEntry(entry.encoder.clone(),
                                              entry.decoder.clone() if entry.decoder is not None else None)
        self.used_bytes += size
        self.stats["puts"] += 1
        while self.used_bytes > self.capacity_bytes and self._entries:  # evict least recently used
            _, victim = self._entries.popitem(last=False)
            self.used_bytes -= victim.nbytes
            self.stats["evictions"] += 1
            self.stats["evicted_bytes"] += victim.nbytes
        return True

    def get(self, key: bytes) -> HostEntry | None:
        """The entry for ``key`` (marked most recently used), or None."""
        entry = self._entries.get(bytes(key))
        if entry is None:
            self.stats["misses"] += 1
            return None
        self._entries.move_to_end(bytes(key))
        self.stats["hits"] += 1
        return entry

    def lookup(self, keys: list[bytes], block_size: int) -> tuple[int, HostEntry | None]:
        """Longest prefix among ``keys`` (chained block keys) that has an entry.

        Returns ``(tokens, entry)``: the boundary it sits on, or ``(0, None)``.
        """
        for i in range(len(keys) - 1, -1, -1):
            if bytes(keys[i]) in self._entries:
                return (i + 1) * block_size, self.get(keys[i])
        self.stats["misses"] += 1
        return 0, None

    def keys(self) -> list[bytes]:
        """Keys from least to most recently used."""
        return list(self._entries)
