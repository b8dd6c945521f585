"""Charts that render without the internet: static SVG for plain charts, bundled vega for dashboards.

altair's default renderer emits HTML that loads vega from a public CDN at display time (an
``Error loading script`` offline), and JupyterLab 4 only bundles a renderer for vega-lite 5 while
altair 6 writes vega-lite 6. The renderer here (``tiered-kv``) asks vl-convert, which embeds vega,
for an SVG (``image/svg+xml`` with a ``text/plain`` fallback): JupyterLab shows it, nbconvert
inlines it, nothing is fetched. Plain charts lose their tooltips; dashboards keep theirs
(:mod:`tiered_kv.viz.widgets`). :func:`enable` only replaces altair's ``default`` renderer.
"""

from __future__ import annotations

NAME = "tiered-kv"


def svg_mimebundle(spec: dict, **_metadata) -> dict:
    """The mimebundle of one vega-lite ``spec``: SVG drawn by vl-convert, and a plain-text line."""
    import altair as alt
    import vl_convert as vlc

    major, minor = alt.SCHEMA_VERSION.lstrip("v").split(".")[:2]  # vl-convert's name: 6.4.1 -> v6_4
    svg = vlc.vegalite_to_svg(spec, vl_version=f"v{major}_{minor}")
    title = spec.get("title")
    if isinstance(title, dict):
        title = title.get("text")
    if isinstance(title, list):
        title = " ".join(map(str, title))
    return {"image/svg+xml": svg, "text/plain": f"<chart: {title}>" if title else "<chart>"}


def enable() -> bool:
    """Make ``tiered-kv`` altair's renderer unless the user picked one; True when it is active."""
    import altair as alt

    if NAME not in alt.renderers.names():
        alt.renderers.register(NAME, svg_mimebundle)
    if alt.renderers.active in ("default", NAME):
        alt.renderers.enable(NAME)
    return alt.renderers.active == NAME
