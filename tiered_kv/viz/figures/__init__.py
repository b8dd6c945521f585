"""One module per reproduced figure; see :mod:`tiered_kv.viz.report` for the contract."""

from __future__ import annotations

import sys
from types import ModuleType


def modules() -> list[ModuleType]:
    """Every figure module (a ``NAME`` and a ``build``), in figure order."""
    from tiered_kv.cli_args import discover

    return discover(sys.modules[__name__], attrs=("NAME", "build"))
