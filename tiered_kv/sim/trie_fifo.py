"""Deprecated alias (issue 13; removed after one release), moved to
:mod:`tiered_kv.sim.peers.trie_fifo`, :mod:`tiered_kv.sim.peers.trie`.
"""

from tiered_kv.sim._moved import alias

__getattr__, __dir__ = alias(
    "tiered_kv.sim.trie_fifo",
    "tiered_kv.sim.peers.trie_fifo",
    "tiered_kv.sim.peers.trie",
)
