"""Small ipywidgets building blocks shared by the dashboards.

A dashboard recomputes its frames in a pure function of the slider values, then swaps the
chart shown in a :class:`ChartView` in place (no flicker, no growing list of outputs, no CDN:
the vega JavaScript is bundled locally). The frames and the chart of the last redraw stay on
the object, which is what the widget tests read.
"""

from __future__ import annotations

import html
import math
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ipywidgets as widgets


def _offline_jupyter_chart():
    """altair's ``JupyterChart`` with its JavaScript bundled locally (no CDN), or None.

    ``JupyterChart.enable_offline`` builds the vega bundle with vl-convert (seconds); the bundle
    is cached in ``~/.cache/tiered-kv`` keyed by the altair and vl-convert versions, so later
    kernels load it in milliseconds. Returns None when anywidget is not installed.
    """
    try:
        import anywidget  # noqa: F401
        import vl_convert
        from altair import JupyterChart
        from altair import __version__ as altair_version
    except ImportError:
        return None
    if getattr(JupyterChart, "_is_offline", False):
        return JupyterChart
    cache_dir = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tiered-kv"
    cache = cache_dir / f"jupyterchart-altair{altair_version}-vlc{vl_convert.__version__}.js"
    if cache.exists():
        # what enable_offline sets, read from the cache (anywidget reads ``_esm`` per instance)
        JupyterChart._esm = cache.read_text()
        JupyterChart._is_offline = True
    else:
        JupyterChart.enable_offline(True)
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(JupyterChart._esm)
            tmp.replace(cache)
        except OSError:
            pass  # a read-only home only costs the rebuild next time
    return JupyterChart


class ChartView:
    """A box holding one altair chart, replaced in place on every :meth:`show`.

    With anywidget installed the chart is an altair ``JupyterChart`` whose spec is swapped
    over the widget channel (the front end re-embeds it in the same element, offline). Without
    it, an ``Output`` area is cleared (``wait=True``) and the chart displayed again.
    """

    def __init__(self) -> None:
        self.output = widgets.Box()
        self._jupyter_chart_cls = _offline_jupyter_chart()
        self._jc = None
        self._out: widgets.Output | None = None
        self.chart: Any = None
        self.spec: dict | None = None
        self.redraws = 0
        self.last_redraw_s = 0.0

    def show(self, chart: Any) -> None:
        t0 = time.perf_counter()
        self.chart = chart
        if self._jupyter_chart_cls is not None:
            if self._jc is None:
                self._jc = self._jupyter_chart_cls(chart)
                self.output.children = (self._jc,)
            else:
                self._jc.chart = chart
            self.spec = self._jc.spec
        else:
            from IPython.display import display

            if self._out is None:
                self._out = widgets.Output()
                self.output.children = (self._out,)
            self.spec = chart.to_dict()
            with self._out:
                self._out.clear_output(wait=True)
                display(chart)
        self.redraws += 1
        self.last_redraw_s = time.perf_counter() - t0

    def show_data(self, template: Any, datasets: dict[str, list[dict]]) -> None:
        """Redraw ``template`` (a chart over named data sources) with new ``datasets``.

        The template's spec is built and validated once; a redraw only swaps the top-level
        ``datasets`` of the spec (a few hundred rows), so no altair object is rebuilt per move.
        """
        t0 = time.perf_counter()
        if getattr(self, "_template", None) is not template:
            self._template = template
            self._template_spec = template.to_dict()
        spec = dict(self._template_spec)
        spec["datasets"] = datasets
        self.spec = spec
        self.chart = None  # built from the spec on demand (see ``current_chart``)
        if self._jupyter_chart_cls is not None:
            if self._jc is None:
                self._jc = self._jupyter_chart_cls(template)
                self.output.children = (self._jc,)
            self._jc.spec = spec
        else:
            import altair as alt
            from IPython.display import display

            if self._out is None:
                self._out = widgets.Output()
                self.output.children = (self._out,)
            with self._out:
                self._out.clear_output(wait=True)
                display(alt.VegaLite(spec))
        self.redraws += 1
        self.last_redraw_s = time.perf_counter() - t0

    def current_chart(self) -> Any:
        """The chart on screen as an altair object (e.g. to ``.save`` it as PNG)."""
        if self.chart is None and self.spec is not None:
            return _from_spec(self.spec)
        return self.chart


def _from_spec(spec: dict) -> Any:
    import altair as alt

    for cls in (alt.HConcatChart, alt.VConcatChart, alt.LayerChart, alt.Chart):
        try:
            return cls.from_dict(spec)
        except Exception:  # noqa: BLE001 - try the next top-level kind
            continue
    raise ValueError("cannot rebuild an altair chart from this spec")


def records(frame: Any) -> list[dict]:
    """Rows of a polars frame as JSON-safe dicts (non-finite floats become null)."""
    out = frame.to_dicts()
    for row in out:
        for k, v in row.items():
            if isinstance(v, float) and not math.isfinite(v):
                row[k] = None
    return out


def html_table(rows: list[dict], css_class: str = "tkv-table", cell_classes: dict[str, str] | None = None) -> str:
    """A plain HTML table; ``cell_classes`` maps a column to a CSS class prefix (``prefix-ROW``).

    The CSS classes let the browser test find a number on the page without parsing text.
    """
    if not rows:
        return ""
    cols = list(rows[0])
    cell_classes = cell_classes or {}
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = []
    for row in rows:
        tds = []
        key = str(next(iter(row.values())))
        for c in cols:
            cls = f' class="{cell_classes[c]}-{html.escape(key)}"' if c in cell_classes else ""
            tds.append(f"<td{cls}>{html.escape(str(row[c]))}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    return f'<table class="{css_class}"><tr>{head}</tr>{"".join(body)}</table>'


def log_slider(description: str, value: float, lo: float, hi: float, *, steps: int = 240,
               readout_format: str = ".3g") -> widgets.FloatLogSlider:
    """A base-10 log slider spanning [lo, hi] in about ``steps`` steps, continuous_update off.

    ``continuous_update=False`` redraws once per release, not on every pixel of a drag.
    """
    import math

    lo_e, hi_e = math.log10(lo), math.log10(hi)
    value = min(max(value, lo), hi)
    return widgets.FloatLogSlider(
        value=value, base=10, min=lo_e, max=hi_e, step=(hi_e - lo_e) / steps,
        description=description, readout_format=readout_format, continuous_update=False,
        style={"description_width": "initial"}, layout=widgets.Layout(width="480px"),
    )


@contextmanager
def torch_threads(n: int | None):
    """Run torch with ``n`` intra-op threads inside the block (None: leave as is).

    Small models on a shared CPU run fastest on one thread; many threads fighting over two
    cores make a 64-wide matmul take milliseconds. The previous setting is restored.
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
