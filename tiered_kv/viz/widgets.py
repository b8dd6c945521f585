"""Small ipywidgets building blocks shared by the dashboards.

A dashboard recomputes its frames in a pure function of the slider values, then swaps the
chart shown in a :class:`ChartView` in place (no flicker, no growing list of outputs, no CDN:
the vega JavaScript is bundled locally). The frames and the spec of the last redraw stay on
the objects, which is what the widget tests read.

Every dashboard wires its controls with :func:`watch`, so an exception in a callback shows in
the dashboard (:func:`error_box`) instead of leaving a stale chart; sliders whose values are
durations, bytes or tokens get a readout for people (:func:`attach_readout`).
"""

from __future__ import annotations

import html
import math
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from tiered_kv import units as u


def _offline_jupyter_chart():
    """altair's ``JupyterChart`` with its JavaScript bundled locally (no CDN).

    ``JupyterChart.enable_offline`` builds the vega bundle with vl-convert (seconds); the bundle
    is cached in ``~/.cache/tiered-kv`` keyed by the altair and vl-convert versions, so later
    kernels load it in milliseconds.
    """
    import vl_convert
    from altair import JupyterChart
    from altair import __version__ as altair_version

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
    """A box holding one altair chart, replaced in place on every :meth:`show`: an altair
    ``JupyterChart`` (anywidget, a dependency) whose spec is swapped over the widget channel."""

    def __init__(self) -> None:
        self.output = widgets.Box()
        self._jupyter_chart_cls = _offline_jupyter_chart()  # its bundle is ready before the first redraw
        self._jc: Any = None
        self._template: Any = None
        self.spec: dict | None = None
        self.redraws = 0

    def show_data(self, template: Any, datasets: dict[str, list[dict]]) -> None:
        """Redraw ``template`` (a chart over named data sources) with new ``datasets``: its spec is built
        once and a redraw swaps only the spec's ``datasets``, so no altair object is rebuilt per move."""
        if self._template is not template:
            self._template, self._template_spec = template, template.to_dict()
        self.show(template, {**self._template_spec, "datasets": datasets})

    def show(self, chart: Any, spec: dict | None = None) -> None:
        """Show ``chart``, or ``spec`` (a variant of it) when given; count the redraw."""
        if self._jc is None:
            self._jc = self._jupyter_chart_cls(chart)
            self.output.children = (self._jc,)
        elif spec is None:
            self._jc.chart = chart
        if spec is not None:
            self._jc.spec = spec
        self.spec = spec if spec is not None else self._jc.spec
        self.redraws += 1


class Dashboard:
    """Controls whose every change calls ``refresh``, an error line, an HTML summary and a chart;
    a dashboard builds its controls and what ``refresh`` reads, defines ``refresh`` and ends its
    ``__init__`` with :meth:`assemble`, which draws the first frame."""

    widget: widgets.VBox
    chart_view: ChartView

    def refresh(self, _change=None) -> None:
        raise NotImplementedError

    def assemble(self, watched, shown=None, after=()) -> None:
        """Watch ``watched``; lay out ``shown`` (default: each watched control, with its readout box
        when it has one), the error line, the summary, the chart and ``after``; then refresh."""
        self.summary = widgets.HTML()
        self.chart_view = ChartView()
        self.errors = error_box()
        watch(watched, self.refresh, self.errors)
        shown = [control(w) for w in watched] if shown is None else shown
        self.widget = widgets.VBox([*shown, self.errors, self.summary, self.chart_view.output, *after])
        self.refresh()

    def _repr_mimebundle_(self, **kwargs) -> dict:
        """The widget, and a static SVG of the chart it shows now, which stands in where widgets
        cannot run (an exported HTML page, a notebook viewer, an untrusted notebook)."""
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        if self.chart_view.spec:
            try:
                from tiered_kv.viz.render import svg_mimebundle

                bundle["image/svg+xml"] = svg_mimebundle(self.chart_view.spec)["image/svg+xml"]
            except Exception:  # noqa: BLE001 - the widget alone is still the dashboard
                pass
        return bundle


def records(frame: Any) -> list[dict]:
    """Rows of a polars frame as JSON-safe dicts (non-finite floats become null)."""
    return [{k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
            for row in frame.to_dicts()]


def html_table(rows: list[dict], css_class: str = "tkv-table", cell_classes: dict[str, str] | None = None) -> str:
    """A plain HTML table; ``cell_classes`` maps a column to a CSS class prefix (``prefix-ROW``), by
    which the browser test finds a number on the page."""
    if not rows:
        return ""
    cell_classes = cell_classes or {}
    head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
    body = []
    for row in rows:
        key = html.escape(str(next(iter(row.values()))))
        cls = {c: f' class="{p}-{key}"' for c, p in cell_classes.items()}
        body.append("<tr>" + "".join(f"<td{cls.get(c, '')}>{html.escape(str(v))}</td>" for c, v in row.items())
                    + "</tr>")
    return f'<table class="{css_class}"><tr>{head}</tr>{"".join(body)}</table>'


def table_css(css_class: str) -> str:
    """The style of a dashboard's summary table: right-aligned, padded cells."""
    return (f"<style>.{css_class} td, .{css_class} th {{padding: 2px 12px; text-align: right}}"
            f" .{css_class} {{border-collapse: collapse; margin: 4px 0}}</style>")


def slider(cls: type, description: str, *, width: str | None = "480px", **kwargs) -> widgets.Widget:
    """An ipywidgets slider of class ``cls`` that redraws once per release, its description in full."""
    if width is not None:
        kwargs["layout"] = widgets.Layout(width=width)
    return cls(description=description, continuous_update=kwargs.pop("continuous_update", False),
               style={"description_width": "initial"}, **kwargs)


def log_slider(description: str, value: float, lo: float, hi: float, *, steps: int = 240,
               unit: str | None = None) -> widgets.FloatLogSlider:
    """A base-10 log slider spanning [lo, hi] in about ``steps`` steps; with ``unit`` (a key of
    :data:`UNITS`) its readout is a text box (:func:`attach_readout`, shown by :func:`control`)."""
    lo_e, hi_e = math.log10(lo), math.log10(hi)
    s = slider(widgets.FloatLogSlider, description, value=min(max(value, lo), hi), base=10, min=lo_e, max=hi_e,
               step=(hi_e - lo_e) / steps, readout_format=".3g")
    if unit is not None:
        attach_readout(s, unit)
    return s


def _parse_days(value) -> float:
    """Days from what a person types into a TTL readout; a bare number means days."""
    if isinstance(value, str):
        try:
            value = f"{float(value.strip())}d"
        except ValueError:
            pass
    return u.parse_duration(value, name="TTL") / u.DAY_S


#: Units a slider readout can speak: name -> (format for people, parse what a person types).
UNITS = {
    "seconds": (u.format_duration, lambda v: u.parse_duration(v, name="duration")),
    "days": (lambda d: u.format_duration(d * u.DAY_S), _parse_days),
    "bytes": (u.format_bytes, lambda v: float(u.parse_bytes(v, name="size"))),
    "tokens": (u.format_tokens, lambda v: float(u.parse_tokens(v, name="tokens"))),
}


def attach_readout(slider: widgets.FloatLogSlider | widgets.FloatSlider, unit: str) -> widgets.Text:
    """Replace ``slider``'s numeric readout by a text box in ``unit`` (a key of :data:`UNITS`) that
    follows the slider; a value typed into it (``20s``, ``3 d``, ``2TiB``, ``8M``) moves the slider
    (clamped to its range), and what cannot be parsed is answered in the box's tooltip."""
    if unit not in UNITS:
        raise ValueError(f"unit: must be one of {tuple(UNITS)}, got {unit!r}")
    fmt, parse = UNITS[unit]
    box = widgets.Text(value=fmt(slider.value), continuous_update=False, layout=widgets.Layout(width="130px"))
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
        try:
            value = parse(change["new"])
            log = isinstance(slider, widgets.FloatLogSlider)
            lo, hi = (slider.base ** slider.min, slider.base ** slider.max) if log else (slider.min, slider.max)
            box.tooltip = None
            slider.value = min(max(value, lo), hi)  # fires from_slider, which rewrites the box
        except ValueError as exc:
            box.tooltip = str(exc)
        state["busy"] = True  # the text typed is replaced by the slider's value, in the unit
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


def error_box() -> widgets.HTML:
    """An empty line a dashboard shows under its controls; :func:`watch` writes exceptions into it."""
    box = widgets.HTML(value="")
    box.add_class("tkv-error-box")
    return box


def guard(callback: Callable[..., Any], errors: widgets.HTML) -> Callable[..., Any]:
    """``callback`` with any exception shown in ``errors`` (and kept on ``errors.last_error``) until the
    next call succeeds: ipywidgets runs observers from the comm handler, so an exception there
    reaches the server's log, not the notebook, and the chart silently goes stale."""

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
