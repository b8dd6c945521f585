"""Start Belady's background compile as the first thing ``tiered-kv curves`` does, before numpy and numba load.

Why: :mod:`tiered_kv.sim.policies.precompile` compiles Belady's stack pass in a second process
on a first run (numba's cache empty), and that compile is the longest stretch of a cold
``curves``. Its own check that the kernel is cached needs numba (and the policy package), about
0.3 s of imports that the helper would otherwise wait for before it starts. This module asks
the same question of the file system alone: is there a numba index file for
``belady.stack_pass`` where numba would put it (``NUMBA_CACHE_DIR``, else the source's
``__pycache__``, else the user-wide cache)? When there is, nothing starts (a warm run pays a
few ``stat`` calls). When there is not, the helper starts at once; it checks again with numba
itself and exits at once if the kernel was cached after all (a stale guess costs a process that
does nothing, never a wrong result: the caller loads or compiles the kernel either way). When
the ahead-of-time build (:mod:`tiered_kv.sim.aot`, numpy- and numba-free to ask) is fresh, the
kernel needs no compiling at all and nothing starts either.
"""

from __future__ import annotations

import glob
import hashlib
import os
import subprocess
import sys
from pathlib import Path

#: The kernel's source file and name, as numba names its cache files.
SOURCE = Path(__file__).resolve().parent.parent / "sim" / "policies" / "belady.py"
QUALNAME = "stack_pass"


def index_dirs(source: Path = SOURCE) -> list[str] | None:
    """Folders numba may keep ``source``'s cache index in, in its order; None when it cannot be told."""
    if os.environ.get("NUMBA_CACHE_LOCATOR_CLASSES"):
        return None
    src_dir = os.path.dirname(os.path.abspath(source))
    sub = "_".join([os.path.split(src_dir)[-1], hashlib.sha1(src_dir.encode()).hexdigest()])
    if os.environ.get("NUMBA_CACHE_DIR"):
        return [os.path.join(os.environ["NUMBA_CACHE_DIR"], sub)]
    user = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [os.path.join(src_dir, "__pycache__"), os.path.join(user, "numba", sub)]


def index_pattern(source: Path = SOURCE, qualname: str = QUALNAME) -> str:
    """The index file name numba uses for ``qualname`` (any first line number)."""
    v = sys.version_info
    return f"{source.stem}.{qualname}-*.py{v.major}{v.minor}{getattr(sys, 'abiflags', '')}.nbi"


def maybe_cached() -> bool:
    """True when Belady's kernel needs no compiling (AOT build, numba index, JIT off), without numba or numpy."""
    if os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0"):
        return True
    from tiered_kv.sim import aot

    if aot.fresh("tiered_kv.sim.policies.belady", QUALNAME):
        return True  # served by the ahead-of-time build: nothing to compile
    dirs = index_dirs()
    if dirs is None:
        return False  # the helper decides with numba
    pattern = index_pattern()
    return any(glob.glob(os.path.join(glob.escape(d), pattern)) for d in dirs)


def start() -> subprocess.Popen | None:
    """The helper process compiling Belady's kernel, unless its index exists; None when none started."""
    if maybe_cached():
        return None
    try:
        return subprocess.Popen([sys.executable, "-m", "tiered_kv.sim.policies.precompile"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return None
