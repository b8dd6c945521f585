"""Call a numba kernel whose machine code is in numba's on-disk cache without numba's full set-up.

Why: the first time a process calls any ``@njit(cache=True)`` kernel, numba initialises its
whole CPU target before it even looks in the cache (it imports and installs every typing and
lowering registry: NumPy, random, linalg, typed containers, ...), about 0.2 s of a warm
``tiered-kv curves`` whose work takes 0.04 s. Loading a cached kernel needs none of that: only
the runtime's C symbols (for the arrays the kernel allocates) and the cache entry itself.
:func:`call` does just those two steps for the types of the arguments it is given, registers
the loaded code with the dispatcher as numba's own cache hit does (``Dispatcher.compile``), and
then calls the kernel normally, so the result is the cached machine code's result bit for bit.

When anything is missing (no cache entry for these types, a stale one, caching off,
``NUMBA_DISABLE_JIT``, a numba without these internals) the kernel is simply called, and numba
compiles or loads it the usual way, set-up included. Used at the call sites of the kernels a
warm ``curves`` or ``simulate`` run needs; nothing else changes.

Before any of that, :func:`call` runs the kernel from the ahead-of-time build
(:mod:`tiered_kv.sim.aot`) when the build is fresh and the arguments fit its signature exactly:
then numba is not even imported.
"""

from __future__ import annotations

from typing import Any

from tiered_kv.sim.aot import kernel_of


def preload(kernel: Any, args: tuple) -> bool:
    """Load ``kernel``'s cached overload for the types of ``args``; True when it is loaded now."""
    cache = getattr(kernel, "_cache", None)
    if cache is None or not getattr(cache, "_enabled", False):
        return False
    try:
        sig = tuple(kernel.typeof_pyval(a) for a in args)
        if sig in kernel.overloads:
            return True
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.runtime import rtsys

        with global_compiler_lock:
            ctx = kernel.targetctx
            rtsys.initialize(ctx)  # NRT symbols for the kernel's array allocations
            cres = cache._load_overload(sig, ctx)  # None: not cached, or stale (source changed)
            if cres is None:
                return False
            kernel._cache_hits[sig] += 1
            if not cres.objectmode:
                ctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
            kernel.add_overload(cres)
        return True
    except Exception:  # any surprise: numba's own path below loads or compiles it
        return False


def call(kernel: Any, *args: Any) -> Any:
    """``kernel(*args)``: the ahead-of-time function when it fits, else numba's cached machine code
    loaded by :func:`preload` when there is some, else numba compiles it.

    ``kernel``: a :class:`tiered_kv.sim.aot.Kernel`, its numba dispatcher or any dispatcher.
    """
    k = kernel_of(kernel)
    if k is not None:
        fn = k.aot_function(args)
        if fn is not None:
            return fn(*args)
        kernel = k.dispatcher
    preload(kernel, args)
    return kernel(*args)
