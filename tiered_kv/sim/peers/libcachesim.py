"""libCacheSim (PyPI ``libcachesim``, the cache community's reference simulator) beside the zoo.

libCacheSim knows objects, not prefixes, so the cross-check is at block level: every block
access of the compiled trace becomes one request for one unit-size object (the dense block id
+ 1), written once as libCacheSim's ``oracleGeneral`` binary trace (24-byte records: clock
time, object id, size, the index of the object's next request or -1, which its Belady reads),
and each policy runs through libCacheSim's own C loop (``process_trace``). Hits are compared
with the zoo kernels' block hits (:meth:`tiered_kv.sim.policies.BlockPolicy.block_run`) at the
same capacity in objects. Where definitions differ (Belady's bypass, SLRU's segment rounding)
docs/policies.md says so; with the defaults used here every count is identical.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from tiered_kv.sim.policies import get_policy, next_use
from tiered_kv.sim.trace_replay import CompiledTrace

#: libCacheSim class name -> the zoo policy it is compared with (both at their defaults).
PAIRS = {"LRU": "class-lru", "FIFO": "fifo", "LFU": "lfu", "ARC": "arc", "SLRU": "slru", "TwoQ": "2q",
         "S3FIFO": "s3fifo", "Sieve": "sieve", "Belady": "belady-nobypass"}
INSTALL = "pip install libcachesim  (or: pip install -e '.[peers]')"


def libcachesim_status():
    """(available, version or the reason it is not)."""
    try:
        import libcachesim
    except ImportError as e:
        return False, f"not installed ({INSTALL}): {e}"
    return True, getattr(libcachesim, "__version__", "unknown")


def write_oracle_trace(trace: CompiledTrace, path: str | Path) -> Path:
    """The trace's block accesses as a libCacheSim oracleGeneral binary file."""
    rec = np.dtype([("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
    out = np.empty(trace.n_accesses, dtype=rec)
    t = trace.access_time
    out["t"] = np.clip(t - (t[0] if t.size else 0.0), 0, 2**32 - 1).astype(np.uint32)
    out["id"] = trace.blocks.astype(np.uint64) + 1
    out["size"] = 1
    nxt = next_use(trace)
    out["next"] = np.where(nxt >= trace.n_accesses, -1, nxt)
    path = Path(path)
    out.tofile(path)
    return path


def peer_hits(path: str | Path, policy: str, capacities, n_accesses: int) -> np.ndarray:
    """libCacheSim's hit count of ``policy`` (its class name) at every capacity (objects)."""
    import libcachesim as lcs

    cls = getattr(lcs, policy)
    hashpower = int(min(26, max(16, int(n_accesses).bit_length() + 1)))  # its default (24) is slower here
    hits = []
    for c in capacities:
        reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
        cache = cls(cache_size=int(c), hashpower=hashpower)
        miss_ratio, _ = cache.process_trace(reader)
        hits.append(int(round((1.0 - miss_ratio) * n_accesses)))
    return np.array(hits, dtype=np.int64)


def ours_hits(trace: CompiledTrace, policy: str, capacities) -> np.ndarray:
    """The zoo's block hits of ``policy`` (a registered name) at every capacity (blocks)."""
    pol = get_policy(policy)
    return np.array([int(pol.block_run(trace, int(c))[0].sum()) for c in capacities], dtype=np.int64)


def cross_check(trace: CompiledTrace, capacities, policies=tuple(PAIRS)) -> dict[str, dict]:
    """Per libCacheSim policy: both hit curves and whether they are identical."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="tiered-kv-lcs-") as tmp:
        path = write_oracle_trace(trace, Path(tmp) / "blocks.oracleGeneral.bin")
        for name in policies:
            peer = peer_hits(path, name, capacities, trace.n_accesses)
            ours = ours_hits(trace, PAIRS[name], capacities)
            out[name] = {"ours_policy": PAIRS[name], "identical": bool(np.array_equal(peer, ours)),
                         "hits_peer": peer.tolist(), "hits_ours": ours.tolist()}
    return out
