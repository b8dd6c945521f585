"""Small ipywidgets building blocks shared by the dashboards.

A dashboard recomputes its frames in a pure function of the slider values, then swaps the
chart shown in a :class:`ChartView` in place (no flicker, no growing list of outputs, no CDN:
the vega JavaScript is bundled locally). The frames and the chart of the last redraw stay on
the object, which is what the widget tests read.

Every dashboard wires its controls with :func:`watch`, so an exception in a callback shows in
the dashboard (:func:`error_box`) instead of leaving a stale chart; sliders whose values are
durations, bytes or tokens get a readout for people (:func:`attach_readout`).
"""

from __future__ import annotations

import html
import math
import os
import time
import traceback
from collections.abc import Callable
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
            self.spec = chart.to_dict()
            self._display(chart)
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
        self.chart = None  # the spec alone describes it
        if self._jupyter_chart_cls is not None:
            if self._jc is None:
                self._jc = self._jupyter_chart_cls(template)
                self.output.children = (self._jc,)
            self._jc.spec = spec
        else:
            import altair as alt

            self._display(alt.VegaLite(spec))
        self.redraws += 1
        self.last_redraw_s = time.perf_counter() - t0

    def _display(self, chart: Any) -> None:
        """Without anywidget: display ``chart`` in an ``Output`` area, clearing what it showed."""
        from IPython.display import display

        if self._out is None:
            self._out = widgets.Output()
            self.output.children = (self._out,)
        with self._out:
            self._out.clear_output(wait=True)
            display(chart)

def dashboard_bundle(widget: widgets.Widget, chart_view: ChartView | None = None, **kwargs) -> dict:
    """A dashboard's display: its widget, and a static SVG of the chart it shows now.

    JupyterLab (and any front end with the widget manager) draws the widget and ignores the
    SVG. Where widgets cannot run (an exported HTML notebook opened offline, a notebook viewer,
    a notebook whose outputs are not trusted) the SVG stands in, so the chart is still there.
    """
    bundle = dict(widgets.VBox._repr_mimebundle_(widget, **kwargs) if isinstance(widget, DashboardBox)
                  else widget._repr_mimebundle_(**kwargs) or {})
    spec = getattr(chart_view, "spec", None)
    if spec:
        try:
            from tiered_kv.viz.render import svg_mimebundle

            bundle["image/svg+xml"] = svg_mimebundle(spec)["image/svg+xml"]
        except Exception:  # noqa: BLE001 - the widget alone is still the dashboard
            pass
    return bundle


class DashboardBox(widgets.VBox):
    """A VBox that displays with a static SVG of ``chart_view``'s chart (:func:`dashboard_bundle`).

    For dashboards whose public object is the box itself (``economics_dashboard``).
    """

    chart_view: ChartView | None = None

    def _repr_mimebundle_(self, **kwargs) -> dict:
        return dashboard_bundle(self, self.chart_view, **kwargs)


class Dashboard:
    """Controls whose every change calls ``refresh``, an error line, an HTML summary and a chart.

    A dashboard builds its controls, calls :meth:`assemble` and defines ``refresh``; it displays
    as its widget with a static SVG of its chart (:func:`dashboard_bundle`).
    """

    widget: widgets.Widget
    chart_view: ChartView

    def refresh(self, _change=None) -> None:
        raise NotImplementedError

    def assemble(self, watched, shown, box: type = widgets.VBox) -> None:
        """Watch ``watched``; lay out ``shown``, the error line, the summary and the chart in a ``box``."""
        self.summary = widgets.HTML()
        self.chart_view = ChartView()
        self.errors = error_box()
        watch(watched, self.refresh, self.errors)
        self.widget = box([*shown, self.errors, self.summary, self.chart_view.output])
        if isinstance(self.widget, DashboardBox):
            self.widget.chart_view = self.chart_view

    def _repr_mimebundle_(self, **kwargs) -> dict:
        return dashboard_bundle(self.widget, self.chart_view, **kwargs)


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
               readout_format: str = ".3g", unit: str | None = None) -> widgets.FloatLogSlider:
    """A base-10 log slider spanning [lo, hi] in about ``steps`` steps, continuous_update off.

    ``continuous_update=False`` redraws once per release, not on every pixel of a drag. With
    ``unit`` (a key of :data:`UNITS`) the slider's own readout is replaced by a text box that
    shows the value for people (``3 d``, ``2.48 TiB``, ``4.5M tokens``) and reads a typed value
    in any form :mod:`tiered_kv.units` parses; the box is ``slider.readout_box`` and
    :func:`control` returns the slider with it.
    """
    lo_e, hi_e = math.log10(lo), math.log10(hi)
    value = min(max(value, lo), hi)
    slider = widgets.FloatLogSlider(
        value=value, base=10, min=lo_e, max=hi_e, step=(hi_e - lo_e) / steps,
        description=description, readout_format=readout_format, continuous_update=False,
        style={"description_width": "initial"}, layout=widgets.Layout(width="480px"),
    )
    if unit is not None:
        attach_readout(slider, unit)
    return slider


def _days(value) -> float:
    from tiered_kv.units import parse_duration

    return parse_duration(value if isinstance(value, (int, float)) else _default_unit(value, "d"),
                          name="TTL") / 86_400.0


def _default_unit(text: str, unit: str) -> str:
    """A bare number typed into a readout means the slider's own unit."""
    try:
        return f"{float(text.strip())}{unit}"
    except ValueError:
        return text


def _units():
    from tiered_kv import units as u

    return {
        "seconds": (u.format_duration, lambda v: u.parse_duration(v, name="duration")),
        "days": (lambda d: u.format_duration(d * 86_400.0), _days),
        "bytes": (u.format_bytes, lambda v: float(u.parse_bytes(v, name="size"))),
        "tokens": (u.format_tokens, lambda v: float(u.parse_tokens(v, name="tokens"))),
    }


#: Units a slider readout can speak: name -> (format for people, parse what a person types).
UNITS = ("seconds", "days", "bytes", "tokens")


def attach_readout(slider: widgets.FloatLogSlider | widgets.FloatSlider, unit: str) -> widgets.Text:
    """Replace ``slider``'s numeric readout by a text box in ``unit`` (one of :data:`UNITS`).

    The box follows the slider; a value typed into it (``20``, ``20s``, ``3 d``, ``2TiB``, ``8M``)
    moves the slider (clamped to its range). What cannot be parsed is answered in the box's
    tooltip and the box shows the slider's value again.
    """
    if unit not in UNITS:
        raise ValueError(f"unit: must be one of {UNITS}, got {unit!r}")
    fmt, parse = _units()[unit]
    box = widgets.Text(value=fmt(slider.value), continuous_update=False,
                       layout=widgets.Layout(width="130px"))
    box.add_class("tkv-readout")
    state = {"busy": False}

    def from_slider(change) -> None:
        if not state["busy"]:
            state["busy"] = True
            box.value = fmt(change["new"])
            state["busy"] = False

    def from_box(change) -> None:
        if state["busy"]:
            return
        state["busy"] = True
        try:
            value = parse(change["new"])
            if isinstance(slider, widgets.FloatLogSlider):
                lo, hi = slider.base ** slider.min, slider.base ** slider.max
            else:
                lo, hi = slider.min, slider.max
            box.tooltip = None
            state["busy"] = False
            slider.value = min(max(value, lo), hi)  # fires from_slider, which rewrites the box
            state["busy"] = True
        except ValueError as exc:
            box.tooltip = str(exc)
        box.value = fmt(slider.value)
        state["busy"] = False

    slider.readout = False
    slider.observe(from_slider, names="value")
    box.observe(from_box, names="value")
    slider.readout_box = box
    return box


def control(slider: widgets.Widget) -> widgets.Widget:
    """What a dashboard displays for ``slider``: itself, or it beside its readout box."""
    box = getattr(slider, "readout_box", None)
    return slider if box is None else widgets.HBox([slider, box])


# --- errors of widget callbacks --------------------------------------------------------------


def error_box() -> widgets.HTML:
    """An empty line a dashboard shows under its controls; :func:`watch` writes exceptions into it."""
    box = widgets.HTML(value="")
    box.add_class("tkv-error-box")
    return box


def guard(callback: Callable[..., Any], errors: widgets.HTML) -> Callable[..., Any]:
    """``callback`` with any exception shown in ``errors`` instead of lost in the kernel log.

    ipywidgets runs observers from the comm handler: an exception there reaches the log of the
    server, not the notebook, so the numbers above a chart update and the chart silently goes
    stale. Here the exception's type and message appear in the widget (traceback folded under
    them) until the next callback succeeds; the error is also kept on ``errors.last_error``.
    """

    def run(*args, **kwargs):
        try:
            out = callback(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - shown to the user, who can act on it
            errors.last_error = exc
            tb = html.escape("".join(traceback.format_exception(exc)))
            errors.value = (f'<div class="tkv-error" style="color:#b03a2e;border-left:3px solid #b03a2e;'
                            f'padding:2px 8px;margin:4px 0"><b>the dashboard could not redraw:</b> '
                            f"{html.escape(type(exc).__name__)}: {html.escape(str(exc))}"
                            f'<details><summary>traceback</summary><pre style="font-size:11px">{tb}'
                            "</pre></details></div>")
            return None
        errors.last_error = None
        errors.value = ""
        return out

    return run


def watch(controls, callback: Callable[..., Any], errors: widgets.HTML) -> None:
    """Call ``callback`` on every ``value`` change of ``controls``, exceptions shown in ``errors``."""
    run = guard(callback, errors)
    for w in controls:
        w.observe(run, names="value")


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
