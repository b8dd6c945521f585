"""Altair figures and ipywidgets dashboards. Only presentation lives here; numbers come from the package.

Notebooks call these modules (one per notebook idea) and hold no logic of their own.
:func:`notebook_size` is the one switch a notebook reads to pick small inputs: the notebook test
sets ``TIERED_KV_QUICK=1`` so every notebook executes headless in seconds, while a researcher gets
full-size runs by default. :mod:`.widgets` holds what the dashboards share, :mod:`.render` the
offline renderer of plain charts, and :mod:`.figures` the figures of ``tiered-kv reproduce``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

QUICK_ENV = "TIERED_KV_QUICK"


def is_quick() -> bool:
    return os.environ.get(QUICK_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def notebook_size(size: str | None = None) -> str:
    """``size`` when given (checked), else ``"small"`` under ``TIERED_KV_QUICK=1`` (CI, workshops on
    laptops) and ``"full"`` otherwise: the key of every size table a notebook function reads."""
    if not size:
        return "small" if is_quick() else "full"
    if size not in ("small", "full"):
        raise ValueError(f"size: must be 'small' or 'full', got {size!r}")
    return size


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run torch with ``n`` intra-op threads inside the block (None: leave as is), then restore.

    Small models on a shared CPU run fastest on one thread; many threads fighting over two
    cores make a 64-wide matmul take milliseconds.
    """
    if n is None:
        yield
        return
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


if "IPython" in sys.modules:  # a notebook or IPython: charts must render without the internet
    from tiered_kv.viz import render as _render

    _render.enable()
