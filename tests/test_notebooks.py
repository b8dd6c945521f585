"""Every notebook executes headless at small size (TIERED_KV_QUICK=1) without an error.

Notebooks hold no logic; this test is what keeps them in step with the package. Cleanliness
(no outputs, no execution counts) is checked in tests/test_packaging.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import runs_engines

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
ALL = sorted(NOTEBOOKS.glob("*.ipynb"))


def test_the_notebooks_of_the_workbench_exist():
    names = {p.stem for p in ALL}
    expected = {"00_tour", "01_window_and_replay", "02_fp4", "03_retention", "04_ttft_and_cost",
                "05_reproduce", "06_workshop", "06_workshop_solutions", "07_policy_arena"}
    assert expected <= names, f"missing notebooks: {sorted(expected - names)}"


def test_notebooks_hold_no_logic():
    """Code cells import, call and display: no def, class, loops or lambdas of their own."""
    banned = ("def ", "class ", "for ", "while ", "lambda")
    for path in ALL:
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            src = "".join(cell["source"])
            for word in banned:
                assert word not in src, f"{path.name}: code cell holds logic ({word.strip()!r}): {src[:80]!r}"


def _execute(path: Path):
    """Run one notebook in a fresh kernel; return (the executed notebook, the error or None)."""
    book = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        book, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    try:
        client.execute()  # raises CellExecutionError with the failing cell and traceback
    except Exception as exc:  # noqa: BLE001 - reported by the test of this notebook
        return book, exc
    return book, None


@pytest.fixture(scope="module")
def executed():
    """Every notebook, executed two at a time (one kernel per core) at small size."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    old = {k: os.environ.get(k) for k in ("TIERED_KV_QUICK", "XDG_CACHE_HOME")}
    os.environ["TIERED_KV_QUICK"] = "1"
    os.environ.setdefault("XDG_CACHE_HOME", str(Path.home() / ".cache"))  # share the vega bundle cache
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            # a notebook that runs vLLM engines first: it takes as long as several others together,
            # so the other kernel works through the rest meanwhile
            order = sorted(ALL, key=lambda p: not runs_engines(p))
            results = dict(zip(order, pool.map(_execute, order), strict=True))
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return results


@pytest.mark.slow
@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_notebook_executes_at_small_size(path: Path, executed):
    book, error = executed[path]
    if error is not None:
        raise error
    errors = [o for c in book.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    if path.stem == "06_workshop_solutions":
        checks = [o["data"]["text/html"] for c in book.cells if c.cell_type == "code"
                  for o in c.get("outputs", []) if "tkv-check" in o.get("data", {}).get("text/html", "")]
        from tiered_kv.viz.workshop import EXERCISES

        assert len(checks) == len(EXERCISES) and all("correct:" in h and "not quite" not in h for h in checks), checks


#: A cell that draws a chart (as in tests/test_browser.py).
CHART_CELL = re.compile(r"_chart\(|[Dd]ashboard\(|Gallery\(")


@pytest.mark.slow
@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_notebook_shows_no_stderr(path: Path, executed):
    """A stream on stderr is a red box in JupyterLab (a progress bar, a DeprecationWarning)."""
    book, error = executed[path]
    if error is not None:
        pytest.skip(f"{path.stem} did not execute (reported by its own test)")
    stderr = [(i, "".join(o.get("text", ""))[:200]) for i, c in enumerate(book.cells) if c.cell_type == "code"
              for o in c.get("outputs", []) if o.get("output_type") == "stream" and o.get("name") == "stderr"]
    assert not stderr


@pytest.mark.slow
@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_exported_html_draws_every_chart_offline(path: Path, executed):
    """`make html`: every chart cell is an inline SVG in the page, and the page fetches nothing."""
    from tiered_kv.viz.notebooks import export_html

    book, error = executed[path]
    if error is not None:
        pytest.skip(f"{path.stem} did not execute (reported by its own test)")
    page = export_html(book)
    fetched = re.findall(r"""<(?:script|link|img|iframe)[^>]+(?:src|href)=["']((?:https?:)?//[^"']+)""", page)
    assert not fetched, fetched[:5]
    assert "cdn.jsdelivr.net" not in page and "unpkg.com" not in page and "cdnjs" not in page
    for cell in book.cells:
        if cell.cell_type == "code" and CHART_CELL.search(cell.source):
            data = [o.get("data", {}) for o in cell.get("outputs", [])]
            svgs = [d["image/svg+xml"] for d in data if "image/svg+xml" in d]
            assert svgs, f"{path.stem}: no SVG for {cell.source[:60]!r}"
            assert all(s.lstrip().startswith("<svg") for s in svgs)
    assert page.count("data:image/svg+xml") + page.count("<svg") >= sum(
        1 for c in book.cells if c.cell_type == "code" and CHART_CELL.search(c.source))
