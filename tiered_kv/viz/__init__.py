"""Altair figures and ipywidgets dashboards. Only presentation lives here; numbers come from the package.

Notebooks call these modules (one per notebook idea) and hold no logic of their own.
:func:`notebook_size` is the one switch a notebook reads to pick small inputs: the notebook test
sets ``TIERED_KV_QUICK=1`` so every notebook executes headless in seconds, while a researcher gets
full-size runs by default. :mod:`.widgets` holds what the dashboards share, :mod:`.render` the
offline renderer of plain charts (made altair's renderer when imported into IPython), and
:mod:`.figures` the figures of ``tiered-kv reproduce``.
"""

from __future__ import annotations

import os
import sys

QUICK_ENV = "TIERED_KV_QUICK"


def is_quick() -> bool:
    return os.environ.get(QUICK_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def notebook_size() -> str:
    """``"small"`` under ``TIERED_KV_QUICK=1`` (CI, workshops on laptops), else ``"full"``."""
    return "small" if is_quick() else "full"


if "IPython" in sys.modules:  # a notebook or IPython: charts must render without the internet
    from tiered_kv.viz import render as _render

    _render.enable()
