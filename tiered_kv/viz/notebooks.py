"""Committed notebooks carry no outputs: a pre-save hook for JupyterLab and the check behind it.

JupyterLab autosaves every notebook it runs, outputs included, into the files git tracks; a
user who ran the workshop and then ``make test`` used to fail the cleanliness test. ``make
lab`` starts JupyterLab with ``scripts/jupyter/jupyter_server_config.py``, which installs
:func:`pre_save_hook`: what is written to disk has no outputs, execution counts or saved
widget state, while the open notebook keeps its outputs on screen. (Reopening it shows the
clean file; ``jupyter nbconvert --execute`` or *Run All* brings the outputs back.) The test
(``tests/test_packaging.py``) reads what git tracks, not the working file.
"""

from __future__ import annotations

from typing import Any

#: Cell metadata JupyterLab adds when it runs a cell (timings, scroll and collapse state).
TRANSIENT_CELL_METADATA = ("execution", "scrolled", "collapsed")


def strip_outputs(nb: dict[str, Any]) -> bool:
    """Remove outputs, execution counts, saved widget state and run metadata from ``nb`` in place.

    ``nb`` is a notebook as JSON (nbformat 4). Returns True when anything was removed.
    """
    changed = False
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        if cell.get("outputs"):
            cell["outputs"] = []
            changed = True
        if cell.get("execution_count") is not None:
            cell["execution_count"] = None
            changed = True
        meta = cell.get("metadata", {})
        for key in TRANSIENT_CELL_METADATA:
            if key in meta:
                del meta[key]
                changed = True
    if "widgets" in nb.get("metadata", {}):
        del nb["metadata"]["widgets"]
        changed = True
    return changed


def dirty_cells(nb: dict[str, Any]) -> list[int]:
    """Indices of code cells that carry outputs or an execution count (empty: clean)."""
    return [i for i, c in enumerate(nb.get("cells", [])) if c.get("cell_type") == "code"
            and (c.get("outputs") or c.get("execution_count") is not None)]


def pre_save_hook(model: dict[str, Any], **_kwargs) -> None:
    """jupyter_server's ``ContentsManager.pre_save_hook``: strip a notebook before it is written."""
    if model.get("type") == "notebook" and isinstance(model.get("content"), dict):
        strip_outputs(model["content"])
