"""Altair figures and ipywidgets dashboards. Only presentation lives here; numbers come from the package.

Notebooks call these modules and hold no logic of their own. :func:`notebook_size` is the one
switch a notebook reads to pick small inputs: the notebook test sets ``TIERED_KV_QUICK=1`` so
every notebook executes headless in seconds, while a researcher gets full-size runs by default.

Modules (one per notebook idea; each dashboard keeps the frames of its last redraw on the
object, which is what ``tests/test_widgets.py`` checks):

- :mod:`.retention`: sliders over a :mod:`tiered_kv.sim.retention.settings` table (hit rates,
  TTL/capacity curves, SSD occupancy and effective retention at any per-class TTL / capacity /
  watermark), real trace and synthetic workload (notebook 03).
- :mod:`.one_watermark`: one GC watermark against the 3 d / 7 d TTL pair, per class (figure 14, notebook 03).
- :mod:`.write_points`: where to write to the SSD tier (figure 19, notebook 03) and the short-prompt
  crossover of recompute against loading (notebook 04).
- :mod:`.fp4`, :mod:`.ttft`, :mod:`.bounded_replay`, :mod:`.tour`: notebooks 02, 04, 01 and 00.
- :mod:`.gallery`: the figures of ``tiered-kv reproduce`` with their claims (notebook 05).
- :mod:`.policy_arena`: every policy's hit rate and SSD wear at every capacity, computed once;
  the arena dashboard over it (notebook 07) and figure 16.
- :mod:`.workshop`: exercises and ``check_answer`` (notebook 06 and its solutions).
- :mod:`.widgets`: the in-place chart view (offline vega bundle) and small widget helpers.
- :mod:`.render`: the offline renderer of plain charts (SVG by vl-convert, no CDN), made
  altair's renderer when this package is imported into an IPython session.
"""

from __future__ import annotations

import os
import sys

QUICK_ENV = "TIERED_KV_QUICK"


def is_quick() -> bool:
    """True when ``TIERED_KV_QUICK`` is set to a true value (1, true, yes)."""
    return os.environ.get(QUICK_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def notebook_size() -> str:
    """``"small"`` under ``TIERED_KV_QUICK=1`` (CI, workshops on laptops), else ``"full"``."""
    return "small" if is_quick() else "full"


if "IPython" in sys.modules:  # a notebook or IPython: charts must render without the internet
    from tiered_kv.viz import render as _render

    _render.enable()
