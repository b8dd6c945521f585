"""Old flat module paths of :mod:`tiered_kv.sim`, kept one release as deprecated aliases.

Issue 13 gave each idea of the simulator its own subpackage. A module that moved keeps a thin
file at its old path whose attributes come from the new modules (:func:`alias`); importing it
emits a :class:`DeprecationWarning` naming the new path. Modules that became packages
(``traces``, ``policies``, ``peers``, ``cluster``, ``retention``) need no alias: the package
itself re-exports their public names.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable


def alias(old: str, *new: str) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the module ``old``: names resolve in ``new``, in order."""
    warnings.warn(f"{old} is deprecated: import {' / '.join(new)} instead", DeprecationWarning, stacklevel=3)
    targets = [importlib.import_module(n) for n in new]

    def __getattr__(name: str) -> object:
        for module in targets:
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {old!r} has no attribute {name!r} (moved to {' / '.join(new)})")

    def __dir__() -> list[str]:
        return sorted({n for module in targets for n in dir(module) if not n.startswith("__")})

    return __getattr__, __dir__
