"""Start-up work of the curves: numpy keys equal the scalar loops, cached kernels load from disk."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

from tiered_kv.sim import curves as C
from tiered_kv.sim.policies.belady import _chained, next_use
from tiered_kv.sim.trace_replay import ReplayOptions, compile_trace
from tiered_kv.sim.traces import random_trace


def _reuse_loop(offsets, blocks, times, n_unique):
    """The scalar loop ttl_keys replaced: running max from 0 of now - last touch, per request."""
    last = np.full(n_unique, -np.inf)
    out = np.empty(blocks.shape[0])
    for r in range(offsets.shape[0] - 1):
        run = 0.0
        for i in range(offsets[r], offsets[r + 1]):
            rt = times[r] - last[blocks[i]]
            last[blocks[i]] = times[r]
            if rt > run:
                run = rt
            out[i] = run
    return out


def _chained_loop(offsets, blocks, n_unique):
    parent = np.full(n_unique, -2, np.int64)
    for r in range(offsets.shape[0] - 1):
        prev = -1
        for i in range(offsets[r], offsets[r + 1]):
            b = blocks[i]
            if parent[b] == -2:
                parent[b] = prev
            elif parent[b] != prev:
                return False
            prev = b
    return True


def _traces():
    for seed in range(6):
        for opts in (ReplayOptions(), ReplayOptions(order="file"), ReplayOptions(warmup_fraction=0.5)):
            tr = compile_trace(random_trace(seed, n_requests=30), opts)
            yield tr
            rng = np.random.default_rng(seed)
            # ids no longer chained, repeats inside a request, times out of order, a NaN and a -0.0
            blocks = rng.integers(0, max(tr.n_unique // 3, 1), tr.n_accesses).astype(np.int32)
            times = rng.permutation(tr.timestamps)
            times[: min(2, len(times))] = [np.nan, -0.0][: min(2, len(times))]
            yield dataclasses.replace(tr, blocks=blocks, timestamps=times)


@pytest.mark.parametrize("k", range(36))
def test_ttl_keys_and_chained_equal_scalar_loops(k):
    tr = list(_traces())[k]
    ref = _reuse_loop(tr.offsets, tr.blocks, tr.timestamps, tr.n_unique)
    got = C.ttl_keys(tr)
    assert np.array_equal(got.view(np.int64), ref.view(np.int64))  # the same floats, bit for bit
    assert _chained(tr.offsets, tr.blocks, next_use(tr)) == _chained_loop(tr.offsets, tr.blocks, tr.n_unique)


def test_next_use_is_the_next_access_of_the_block():
    tr = compile_trace(random_trace(3, n_requests=40))
    nxt = next_use(tr)
    for i, b in enumerate(tr.blocks):
        later = np.flatnonzero(tr.blocks[i + 1:] == b)
        assert nxt[i] == (i + 1 + later[0] if later.size else tr.n_accesses)


_WARM = """
import hashlib
import numpy as np
from tiered_kv.sim import curves as C
from tiered_kv.sim.policies import belady, lru
from tiered_kv.sim.trace_replay import compile_trace
from tiered_kv.sim.traces import random_trace
tr = compile_trace(random_trace(7, n_requests=60))
caps = C.default_capacities(tr, 12)
parts = [C.lru_keys(tr), C.belady_curve(tr, caps).hit_tokens, C.lru_written_tokens(tr, caps),
         lru.run_cache_kernel(tr, high=50.0)[0]]
kernels = (C._stack_distances, belady.stack_pass, lru._cache_kernel)
misses = sum(sum(k.stats.cache_misses.values()) for k in kernels)
hits = sum(sum(k.stats.cache_hits.values()) for k in kernels)
print(hashlib.sha256(b"".join(np.ascontiguousarray(p).tobytes() for p in parts)).hexdigest(), misses, hits, len(kernels))
"""


def test_kernels_of_curves_and_simulate_load_from_numbas_disk_cache(tmp_path):
    """A second process loads every kernel of a curves/simulate run from numba's cache, same bits.

    Start-up speed rests on ``cache=True`` alone (numba's supported on-disk cache): a kernel on
    the commands' path without it, or one whose types vary between runs, would compile again.
    """
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    env.pop("NUMBA_DISABLE_JIT", None)
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _WARM], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        digest, misses, hits, n = out.stdout.split()
        runs.append((digest, int(misses), int(hits), int(n)))
    n = runs[0][3]
    assert runs[0][1:] == (n, 0, n)  # the first process compiled each kernel once
    assert runs[1] == (runs[0][0], 0, n, n)  # the second loaded every one from the cache, same bits
