"""Deprecated alias (issue 13; removed after one release), moved to
:mod:`tiered_kv.sim.peers.trie_belady`, :mod:`tiered_kv.sim.peers.trie`.
"""

from tiered_kv.sim._moved import alias

__getattr__, __dir__ = alias(
    "tiered_kv.sim.trie_belady",
    "tiered_kv.sim.peers.trie_belady",
    "tiered_kv.sim.peers.trie",
)
