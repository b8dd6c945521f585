"""Compile Belady's kernel in a second process while the first one does everything else.

Why: on a first run (numba's cache empty) ``tiered-kv curves`` spends most of its time in the
LLVM back end, and the largest single kernel, Belady's priority-stack pass
(:func:`~tiered_kv.sim.policies.belady.stack_pass`, which counts hits and writes), takes about as long to compile as loading
the trace and compiling every other kernel together. Those two halves do not depend on each
other, and the machine has a second core: :func:`start` launches ``python -m
tiered_kv.sim.policies.precompile``, which compiles that kernel for the exact argument
types :func:`~tiered_kv.sim.policies.belady.belady_stack` passes and writes them to numba's
on-disk cache; the caller goes on, and by the time it reaches Belady its own first call loads the
kernel from that cache instead of compiling it. (The check that the trace's ids are chained,
which Belady's one pass needs, is plain numpy: nothing else is left to compile for Belady.)

Nothing depends on the helper succeeding: :func:`wait` gives it a bounded time and any failure
(no writable cache, ``NUMBA_DISABLE_JIT``, a killed process) only means the caller compiles the
kernel itself, as it would have without this module. When the cache already holds the kernel
no process is started at all (a warm run pays nothing), nor when the ahead-of-time build
(:mod:`tiered_kv.sim.aot`) serves the kernel. The helper compiles numba's dispatcher itself
(:func:`tiered_kv.sim.aot.dispatcher_of`), never the build's function.
"""

from __future__ import annotations

import os
import subprocess
import sys

#: Seconds :func:`wait` gives the helper before the caller compiles on its own.
WAIT_S = 60.0


def _kernels():
    from tiered_kv.sim.aot import dispatcher_of
    from tiered_kv.sim.policies.belady import stack_pass

    return (dispatcher_of(stack_pass),)


def cached() -> bool:
    """True when numba's on-disk cache has an entry for Belady's kernel (or caching is off, or the
    ahead-of-time build serves it)."""
    if os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0"):
        return True
    from tiered_kv.sim import aot

    if aot.fresh("tiered_kv.sim.policies.belady", "stack_pass"):
        return True
    try:
        return all(os.path.exists(k._cache._cache_file._index_path) for k in _kernels())
    except Exception:  # a numba without these internals: never start a helper
        return True


def start() -> subprocess.Popen | None:
    """Start the compiling process unless the kernel is cached; returns it (or None)."""
    if cached():
        return None
    try:
        return subprocess.Popen([sys.executable, "-m", "tiered_kv.sim.policies.precompile"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return None


def wait(proc: subprocess.Popen | None, timeout: float = WAIT_S) -> bool:
    """Wait for ``proc`` (from :func:`start`); True when it finished cleanly."""
    if proc is None:
        return False
    try:
        return proc.wait(timeout=timeout) == 0
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return False


def compile_now() -> None:
    """Compile (and cache) Belady's kernel for the argument types the one pass uses."""
    import numpy as np

    (stack_pass,) = _kernels()
    one = np.zeros(1, np.int64)
    # belady_stack: int64 arrays, int64 scalars (see its call), the written weights and their histogram
    stack_pass(one, one, one, np.int64(1), one, one, np.int64(1), np.int64(1), np.ones(1, np.int64), one,
               np.zeros(2, np.int64))
    # (not stack_hist, kvcache.ai's trie-Belady wrapper: that semantics never starts this process)


if __name__ == "__main__":
    if not cached():  # started on a guess (tiered_kv.commands._belady_compile): nothing to do if cached
        compile_now()
