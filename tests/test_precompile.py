"""The Belady kernels compiled in a second process land in numba's cache and are used from it."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import glob, os
from tiered_kv.commands import _belady_compile as early
from tiered_kv.sim.policies import precompile as p
assert not p.cached(), "fresh cache dir must start empty"
assert not early.maybe_cached(), "the numba-free guess must see the empty cache too"
proc = p.start()
assert proc is not None
assert p.wait(proc), "the compiling process failed"
assert p.cached()
assert p.start() is None, "no second process once cached"
assert early.maybe_cached() and early.start() is None
# the numba-free guess looks exactly where numba keeps the index
from tiered_kv.sim.policies.belady import stack_pass
found = [f for d in early.index_dirs() for f in glob.glob(os.path.join(d, early.index_pattern()))]
assert found == [stack_pass._cache._cache_file._index_path], (found, stack_pass._cache._cache_file._index_path)
import numpy as np
from tiered_kv.sim.policies.belady import stack_pass
one = np.zeros(3, np.int64)
stack_pass(one, one, one, np.int64(3), one, one, 1, 1, np.ones(1, np.int64), one, np.zeros(2, np.int64))
# the call above was served from the cache the helper wrote, not compiled here
assert stack_pass.stats.cache_hits, stack_pass.stats
print("ok")
"""


def test_background_compile_fills_the_cache(tmp_path):
    # numba's path: with the ahead-of-time build there is nothing to compile (tests/test_aot_kernels.py)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), "TIERED_KV_AOT": "0"}
    env.pop("NUMBA_DISABLE_JIT", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"


def test_nothing_starts_when_the_build_serves_belady(monkeypatch):
    """With a fresh ahead-of-time build neither check starts a compiling process (the build is faked here)."""
    from tiered_kv.commands import _belady_compile as early
    from tiered_kv.sim import aot
    from tiered_kv.sim.policies import precompile

    monkeypatch.setattr(aot, "fresh", lambda module, qualname: (module, qualname)
                        == ("tiered_kv.sim.policies.belady", "stack_pass"))
    assert early.maybe_cached() and early.start() is None
    assert precompile.cached() and precompile.start() is None


def test_wait_on_nothing_is_false():
    from tiered_kv.sim.policies import precompile

    assert precompile.wait(None) is False
