"""tiered-kv: a research workbench for tiered LLM KV-cache storage.

GPU (in-flight) -> host memory (per-machine sliding-window tier, bounded replay) -> SSD
(global KV, FP4, prefix-keyed chunks in Zarr v3). See README.md for the architecture.
"""

import os
import sys
from pathlib import Path

__version__ = "0.1.0"

#: Repository root when the package is used from a checkout (editable install).
REPO_ROOT = Path(__file__).resolve().parent.parent
#: Shipped data: the real Mooncake trace and the trained checkpoint.
DATA_DIR = REPO_ROOT / "data"
#: Where ``tiered-kv reproduce`` writes figures and REPORT.md.
FIGURES_DIR = REPO_ROOT / "figures"


def _default_numba_cache_dir() -> None:
    """Point numba's on-disk cache at ``$XDG_CACHE_HOME/tiered-kv/numba`` unless one is chosen.

    The ``cache=True`` kernels then compile once per machine and load in milliseconds afterwards,
    also when the package is installed read-only, and a cold start is measured by pointing
    ``NUMBA_CACHE_DIR`` at an empty folder. Numba reads the variable when it is imported, so this
    runs here, before any tiered_kv module imports numba; when numba was imported first, or the
    folder cannot be written, numba's own default (``__pycache__`` beside the source) applies.
    """
    if os.environ.get("NUMBA_CACHE_DIR") or "numba" in sys.modules:
        return
    path = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tiered-kv" / "numba"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    if os.access(path, os.W_OK):
        os.environ["NUMBA_CACHE_DIR"] = str(path)


_default_numba_cache_dir()
