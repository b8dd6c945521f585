"""kvcache.ai's three trie policies for the replay engine: ``lru-trie``, ``fifo-trie``, ``belady-trie``.

They register themselves into :mod:`tiered_kv.sim.policies.registry` when this module is
imported (the registry imports it by name on a miss), so ``--policy lru-trie`` and the
``kvcache-ai`` semantics find them. They differ only in their one-capacity replay function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tiered_kv.sim.peers.trie import TrieTrace, from_compiled, underfilled_mask
from tiered_kv.sim.peers.trie_belady import replay_optimal_trie
from tiered_kv.sim.peers.trie_fifo import replay_fifo_trie
from tiered_kv.sim.peers.trie_lru import replay_lru_trie
from tiered_kv.sim.policies.registry import PolicyRun, check_capacity, register_policy


@dataclass(frozen=True)
class TriePolicy:
    """A kvcache.ai policy at ``capacity_tokens`` (None: every distinct block fits)."""

    name: ClassVar[str]
    replay: ClassVar[Callable[[TrieTrace, int], tuple[np.ndarray, bool]]]
    capacity_tokens: int | None = None

    def __post_init__(self) -> None:
        check_capacity(f"{self.name} capacity_tokens", self.capacity_tokens)

    def run(self, trace) -> PolicyRun:
        """Replay at the capacity in blocks under kvcache.ai's underfilled rule
        (:func:`~tiered_kv.sim.peers.trie.underfilled_mask`)."""
        t = from_compiled(trace)
        if self.capacity_tokens is None:
            cap = int(np.unique(trace.blocks).shape[0]) + 1 if trace.n_accesses else 1
        else:
            cap = int(self.capacity_tokens) // trace.uniform_block_size
        hit_blocks, counts = type(self).replay(t, cap)
        underfilled = bool(not counts or underfilled_mask(t, np.array([cap]))[0])
        if underfilled:  # kvcache.ai: a cache that never filled during warm-up reports no hits
            hit_blocks = np.zeros_like(hit_blocks)
        return PolicyRun(np.asarray(hit_blocks, dtype=np.int64),
                         {"capacity_blocks": cap, "underfilled": underfilled, "trie_nodes": t.n_nodes})


def _trie_policy(cls_name: str, name: str, replay_fn, doc: str) -> type:
    """A registered :class:`TriePolicy` subclass called ``name`` that replays with ``replay_fn``."""
    cls = type(cls_name, (TriePolicy,), {"name": name, "replay": staticmethod(replay_fn), "__doc__": doc,
                                         "__module__": __name__, "__qualname__": cls_name})
    return register_policy(dataclass(frozen=True)(cls))


LRUTrie = _trie_policy("LRUTrie", "lru-trie", replay_lru_trie,
                       "kvcache.ai's LRU: leaves of the prefix trie only, hit prefix refreshed, admission stops.")
FIFOTrie = _trie_policy("FIFOTrie", "fifo-trie", replay_fifo_trie,
                        "kvcache.ai's FIFO over trie nodes (oldest inserted first; not prefix-closed).")
BeladyTrie = _trie_policy("BeladyTrie", "belady-trie", replay_optimal_trie,
                          'kvcache.ai\'s "optimal": prefix-trie Belady with bypass (next use in requests).')
