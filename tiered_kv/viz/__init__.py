"""Altair figures and ipywidgets dashboards. Only presentation lives here; numbers come from the package.

Notebooks call these modules and hold no logic of their own. :func:`notebook_size` is the one
switch a notebook reads to pick small inputs: the notebook test sets ``TIERED_KV_QUICK=1`` so
every notebook executes headless in seconds, while a researcher gets full-size runs by default.
"""

from __future__ import annotations

import os

QUICK_ENV = "TIERED_KV_QUICK"


def is_quick() -> bool:
    """True when ``TIERED_KV_QUICK`` is set to a true value (1, true, yes)."""
    return os.environ.get(QUICK_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def notebook_size() -> str:
    """``"small"`` under ``TIERED_KV_QUICK=1`` (CI, workshops on laptops), else ``"full"``."""
    return "small" if is_quick() else "full"
