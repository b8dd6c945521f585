"""One module per reproduced figure; see :mod:`tiered_kv.viz.report` for the contract."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def modules() -> list[ModuleType]:
    """Every figure module (a ``NAME`` and a ``build``), in figure order."""
    found = (importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)
             if not info.name.startswith("_"))
    return sorted((m for m in found if hasattr(m, "build") and hasattr(m, "NAME")), key=lambda m: m.NAME)
