"""The public KV-cache simulators beside tiered-kv: their counting rules, their policies, their files.

:mod:`.semantics` names each tool's way of counting as options of the one replay engine
(``--semantics tiered-kv|kvcache-ai|lmcache``). kvcache.ai's prefix-trie policies: :mod:`.trie`
(the trace as trie nodes and the shared rules), one module per policy with its curve and exact
replay (:mod:`.trie_lru`, :mod:`.trie_fifo`, :mod:`.trie_belady`), and :mod:`.trie_policies`
(which registers them). :mod:`.lmcache_io` reads and writes LMCache's lookup-hash logs;
:mod:`.simulators` runs kvcache-simulator and LMCache's simulator themselves (when installed)
and tiered-kv under their semantics, side by side. This package may import
:mod:`tiered_kv.sim.traces`, :mod:`~tiered_kv.sim.trace_replay`, :mod:`~tiered_kv.sim.policies` and
:mod:`~tiered_kv.sim.curves`; nothing below it imports it (the policy registry loads
:mod:`.trie_policies` by name, at run time, when asked for a name it does not hold).
"""

from tiered_kv.sim.peers.lmcache_io import (
    DTYPE_BYTES,
    bytes_per_chunk,
    chunk_layout,
    hash_to_u64,
    read_lookup_logs,
    write_lookup_jsonl,
)
from tiered_kv.sim.peers.semantics import Semantics, get_semantics
from tiered_kv.sim.peers.simulators import (
    INSTALL_HINT,
    KVCACHE_POLICIES,
    PeerStatus,
    kvcache_status,
    kvcache_trace,
    lmcache_events,
    lmcache_simulator,
    lmcache_status,
    ours_kvcache,
    ours_lmcache,
    peers_dir,
    run_kvcache,
    run_lmcache,
    write_kvcache_jsonl,
)
from tiered_kv.sim.peers.trie import TrieTrace, build_trie, from_compiled, hit_tokens_of
from tiered_kv.sim.peers.trie_belady import optimal_trie_curve, replay_lru_trie_heap, replay_optimal_trie
from tiered_kv.sim.peers.trie_fifo import fifo_trie_curve, replay_fifo_trie
from tiered_kv.sim.peers.trie_lru import lru_trie_curve, replay_lru_trie
from tiered_kv.sim.peers.trie_policies import BeladyTrie, FIFOTrie, LRUTrie, TriePolicy

__all__ = [
    "DTYPE_BYTES", "INSTALL_HINT", "KVCACHE_POLICIES", "BeladyTrie", "FIFOTrie", "LRUTrie", "PeerStatus", "Semantics",
    "TriePolicy", "TrieTrace", "build_trie", "bytes_per_chunk", "chunk_layout", "fifo_trie_curve", "from_compiled",
    "get_semantics", "hash_to_u64", "hit_tokens_of", "kvcache_status", "kvcache_trace", "lmcache_events",
    "lmcache_simulator", "lmcache_status", "lru_trie_curve", "optimal_trie_curve", "ours_kvcache", "ours_lmcache",
    "peers_dir", "read_lookup_logs", "replay_fifo_trie", "replay_lru_trie", "replay_lru_trie_heap",
    "replay_optimal_trie", "run_kvcache", "run_lmcache", "write_kvcache_jsonl", "write_lookup_jsonl",
]
