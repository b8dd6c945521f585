"""Small ipywidgets building blocks shared by the dashboards.

A dashboard recomputes its frames in a pure function of the slider values, then swaps the
chart shown in a :class:`ChartView` in place (one output area, cleared with ``wait=True`` so the
old chart stays until the new one is ready; no flicker, no growing list of outputs). The frames
and the chart of the last redraw stay on the object, which is what the widget tests read.
"""

from __future__ import annotations

import html
import time
from typing import Any

import ipywidgets as widgets


class ChartView:
    """An output area holding one altair chart, replaced in place on every :meth:`show`."""

    def __init__(self) -> None:
        self.output = widgets.Output()
        self.chart: Any = None
        self.spec: dict | None = None
        self.redraws = 0
        self.last_redraw_s = 0.0

    def show(self, chart: Any) -> None:
        from IPython.display import display

        t0 = time.perf_counter()
        self.chart = chart
        self.spec = chart.to_dict()  # validates; also what the front end receives
        with self.output:
            self.output.clear_output(wait=True)
            display(chart)
        self.redraws += 1
        self.last_redraw_s = time.perf_counter() - t0


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


def log_slider(description: str, value: float, lo: float, hi: float, *, steps: int = 60,
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
