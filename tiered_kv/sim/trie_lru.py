"""Deprecated alias (issue 13; removed after one release), moved to
:mod:`tiered_kv.sim.peers.trie_lru` and the other modules of kvcache.ai's trie policies in
:mod:`tiered_kv.sim.peers` (``trie``, ``trie_fifo``, ``trie_belady``, ``trie_policies``).
"""

from tiered_kv.sim._moved import alias

__getattr__, __dir__ = alias(
    "tiered_kv.sim.trie_lru",
    "tiered_kv.sim.peers.trie_lru",
    "tiered_kv.sim.peers.trie",
    "tiered_kv.sim.peers.trie_fifo",
    "tiered_kv.sim.peers.trie_belady",
    "tiered_kv.sim.peers.trie_policies",
)
