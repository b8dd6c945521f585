"""tiered-kv: a research workbench for tiered LLM KV-cache storage.

GPU (in-flight) -> host memory (per-machine sliding-window tier, bounded replay) -> SSD
(global KV, FP4, prefix-keyed chunks in Zarr v3). See README.md for the architecture.
"""

from pathlib import Path

__version__ = "0.1.0"

#: Repository root when the package is used from a checkout (editable install).
REPO_ROOT = Path(__file__).resolve().parent.parent
#: Shipped data: the real Mooncake trace and the trained checkpoint.
DATA_DIR = REPO_ROOT / "data"
#: Where ``tiered-kv reproduce`` writes figures and REPORT.md.
FIGURES_DIR = REPO_ROOT / "figures"
