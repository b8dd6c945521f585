"""Load one of the repository's ``scripts/*.py`` as a module, for the tests that check a page
is what its script renders (the scripts are not a package: they run as files)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a fresh module; a missing script names its path."""
    path = ROOT / "scripts" / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such script (tests run from a checkout of the repository)")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
