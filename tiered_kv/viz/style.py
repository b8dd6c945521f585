"""Chart conventions shared by figures and dashboards.

:func:`dashed_lines` draws the points of dashed lines as a separate layer without a dash encoding:
vega-lite would merge the points' legend into the dash legend and draw one identical black dot per
dash pattern, where a row of dashed strokes is wanted.
"""

from __future__ import annotations

from typing import Any


def dash_legend(title: str, **kwargs: Any):
    """The legend of a dash pattern: a short stroke in each pattern, in a neutral grey."""
    import altair as alt

    return alt.Legend(title=title, symbolType="stroke", symbolStrokeColor="#444", symbolStrokeWidth=2,
                      symbolSize=500, **kwargs)


def dashed_lines(data: Any, *, x: Any, y: Any, dash: str, dash_title: str, color: Any = None,
                 tooltip: list | None = None, dash_legend_kwargs: dict | None = None) -> Any:
    """A layer over ``data`` of lines dashed by the field ``dash`` (legend: strokes) and their points."""
    import altair as alt

    enc = {k: v for k, v in {"x": x, "y": y, "color": color, "tooltip": tooltip}.items() if v is not None}
    lines = alt.Chart().mark_line().encode(
        strokeDash=alt.StrokeDash(dash, legend=dash_legend(dash_title, **(dash_legend_kwargs or {}))), **enc)
    points = alt.Chart().mark_point(filled=True, size=30).encode(**enc)
    return alt.layer(lines, points, data=data)


def capacity_curves(data: Any, *, y_title: str, color: Any, dashed: str, point_size: int) -> Any:
    """Figures 07 and 16: token hit rate against cache capacity (log), a line per ``policy``, the
    ``dashed`` one (the bound the others are read against) dashed, bytes in the tooltip."""
    import altair as alt

    return alt.Chart(data).mark_line(point=alt.OverlayMarkDef(size=point_size)).encode(
        x=alt.X("capacity_tokens:Q", scale=alt.Scale(type="log"), title="cache capacity (tokens, log scale)"),
        y=alt.Y("token_hit_rate:Q", title=y_title, axis=alt.Axis(format="%")),
        color=color,
        strokeDash=alt.condition(alt.datum.policy == dashed, alt.value([5, 4]), alt.value([1, 0])),
        tooltip=["policy", alt.Tooltip("capacity_tokens:Q", format=","),
                 alt.Tooltip("capacity_bytes:Q", format=".3s", title="bytes (DeepSeek-V3 MLA bf16)"),
                 alt.Tooltip("token_hit_rate:Q", format=".2%")])


def hourly_disk_share(hourly: Any, *, x_title: str, y_title: str, color: Any, tooltip: list, title: str) -> Any:
    """Figures 05 and 15: the share of input tokens served from disk (``disk_token_fraction``) per
    ``hour``, one line per ``color``, and DeepSeek's published share dashed, labelled at hour 0.5."""
    import altair as alt
    import polars as pl

    from tiered_kv.sim.cluster.disk_day import PUBLISHED_DISK_FRACTION as share

    line = alt.Chart(hourly).mark_line(point=True).encode(
        x=alt.X("hour:Q", title=x_title),
        y=alt.Y("disk_token_fraction:Q", title=y_title, axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])),
        color=color, tooltip=tooltip)
    rule = alt.Chart(pl.DataFrame({"published": [share]})).mark_rule(strokeDash=[6, 4]).encode(y="published:Q")
    text = pl.DataFrame({"published": [share], "hour": [0.5], "text": [f"DeepSeek: {share:.0%}"]})
    label = alt.Chart(text).mark_text(align="left", dy=-6).encode(x="hour:Q", y="published:Q", text="text:N")
    return alt.layer(line, rule, label).properties(width=520, height=300, title=title)


def binary_unit(max_bytes: float, smallest: str = "KiB") -> tuple[str, float]:
    """(name, bytes) of the largest binary unit of :mod:`tiered_kv.units`, ``smallest`` or larger, in
    which ``max_bytes`` is at least 1; ``("B", 1.0)`` below one ``smallest``."""
    from tiered_kv.units import BYTE_UNITS

    names = ("PiB", "TiB", "GiB", "MiB", "KiB")
    return next(((n, float(BYTE_UNITS[n.lower()])) for n in names[:names.index(smallest) + 1]
                 if max_bytes >= BYTE_UNITS[n.lower()]), ("B", 1.0))
