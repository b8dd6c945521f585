"""Committed notebooks carry no outputs: a pre-save hook for JupyterLab, and offline HTML export.

JupyterLab autosaves every notebook it runs, outputs included, into the files git tracks. ``make
lab`` installs :func:`pre_save_hook` (``scripts/jupyter/jupyter_server_config.py``): what is written
to disk has no outputs, execution counts or saved widget state, while the open notebook keeps its
outputs on screen. ``make html`` (:func:`export_html`) executes each notebook and writes a page
with nothing to fetch from a CDN: plain charts are inline SVG (:mod:`tiered_kv.viz.render`), each
dashboard its chart as it was drawn (:class:`tiered_kv.viz.widgets.Dashboard`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

#: Cell metadata JupyterLab adds when it runs a cell (timings, scroll and collapse state).
TRANSIENT_CELL_METADATA = ("execution", "scrolled", "collapsed")


def strip_outputs(nb: dict[str, Any]) -> bool:
    """Remove outputs, execution counts, saved widget state and run metadata from ``nb`` (nbformat 4
    JSON) in place; True when anything was removed."""
    changed = bool(dirty_cells(nb))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        cell.update({k: v for k, v in (("outputs", []), ("execution_count", None)) if k in cell})
        meta = cell.get("metadata", {})
        for key in set(TRANSIENT_CELL_METADATA) & set(meta):
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


#: nbconvert's lab page without what it loads from CDNs (require.js, MathJax, mermaid, widgets).
OFFLINE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
"""
#: What a page shows of an output, best first: static charts, never a live widget (no kernel).
EXPORT_PRIORITY = ["text/html", "image/svg+xml", "image/png", "image/jpeg", "text/markdown", "text/latex",
                   "text/plain"]


def export_html(nb: Any) -> str:
    """A self-contained HTML page of an executed notebook (nbformat node or JSON dict)."""
    import copy

    import jinja2
    import nbformat
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    book = nbformat.from_dict(copy.deepcopy(dict(nb)))
    book.metadata.pop("widgets", None)
    cfg = Config({"NbConvertBase": {"display_data_priority": EXPORT_PRIORITY}})
    exporter = HTMLExporter(config=cfg, template_name="lab", template_file="offline.html.j2",
                            extra_loaders=[jinja2.DictLoader({"offline.html.j2": OFFLINE_TEMPLATE})])
    body, _ = exporter.from_notebook_node(book)
    return body


def execute_and_export(paths: list[Path], out_dir: Path) -> list[Path]:
    """Run each notebook in a fresh kernel (from its own folder, at most 30 minutes a cell) and write
    ``out_dir/NAME.html``."""
    import nbclient
    import nbformat

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path in paths:
        book = nbformat.read(path, as_version=4)
        nbclient.NotebookClient(book, timeout=1800, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}}).execute()
        target = out_dir / f"{path.stem}.html"
        target.write_text(export_html(book), encoding="utf-8")
        written.append(target)
        print(f"wrote {target}", file=sys.stderr)
    return written


def main(argv: list[str] | None = None) -> int:
    """``python -m tiered_kv.viz.notebooks [NOTEBOOK ...]``: execute and export (``make html``)."""
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(a) for a in args] or sorted(Path("notebooks").glob("*.ipynb"))
    execute_and_export(paths, Path("figures") / "notebooks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
