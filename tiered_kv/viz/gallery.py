"""The figures of ``tiered-kv reproduce``, each beside the published numbers it is checked against.

The gallery builds the figure modules ``tiered-kv reproduce`` discovers (so a new figure shows up
here without an edit), with the same ``quick`` switch, and reads every published/reproduced pair
from their :class:`~tiered_kv.viz.report.Claim` records; no number is typed in.
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass

import ipywidgets as widgets
import polars as pl

from tiered_kv.viz.report import CLAIM_COLUMNS, Claim, FigureResult, claim_cells
from tiered_kv.viz.widgets import Dashboard, guard, html_table


@dataclass(frozen=True)
class BuiltFigure:
    name: str
    title: str
    result: FigureResult
    seconds: float


def claims_frame(figures: list[BuiltFigure]) -> pl.DataFrame:
    """One row per claim: figure, claim, source, published, reproduced, unit, difference, kind."""
    schema = {"figure": pl.Utf8, "claim": pl.Utf8, "source": pl.Utf8, "published": pl.Float64,
              "reproduced": pl.Float64, "unit": pl.Utf8, "relative_difference": pl.Float64,
              "kind": pl.Utf8, "inputs": pl.Utf8}
    rows = [{"figure": f.name, "claim": c.claim, "source": c.source, "published": float(c.published),
             "reproduced": float(c.reproduced), "unit": c.unit, "relative_difference": float(c.relative_difference),
             "kind": c.kind, "inputs": c.inputs} for f in figures for c in f.result.claims]
    return pl.DataFrame(rows, schema=schema)


def claims_html(claims: list[Claim]) -> str:
    """The REPORT.md claims table as HTML (same columns, same formatting), cell by cell from the
    claims, so a ``|`` in a claim's text stays in its cell."""
    return (html_table([dict(zip(CLAIM_COLUMNS, claim_cells(c), strict=True)) for c in claims], css_class="tkv-claims")
            + "<style>.tkv-claims{border-collapse:collapse} .tkv-claims td,.tkv-claims th{padding:2px 8px;"
            "border-bottom:1px solid #ddd;text-align:left;vertical-align:top}</style>")


class Gallery(Dashboard):
    """A dropdown of figures; each shows its chart, notes and claims table (published vs ours).

    Figures are built when first picked (``quick`` sizes under ``TIERED_KV_QUICK=1``); at full
    notebook size, or after the "build every figure" button, all are built and the table of
    every claim fills in. A figure that cannot be built says why (e.g. a missing checkpoint).
    """

    def __init__(self, quick: bool | None = None, eager: bool | None = None) -> None:
        from tiered_kv.viz import is_quick
        from tiered_kv.viz.figures import modules

        self.quick = is_quick() if quick is None else quick
        self.modules = {m.NAME: m for m in modules()}
        if not self.modules:
            raise ValueError("Gallery: no figure modules in tiered_kv/viz/figures")
        self.built: dict[str, BuiltFigure] = {}
        self.failed: dict[str, str] = {}
        self.picker = widgets.Dropdown(options=[(f"{n}: {m.TITLE}", n) for n, m in self.modules.items()],
                                       description="figure", layout=widgets.Layout(width="640px"))
        self.claims, self.all_claims = widgets.HTML(), widgets.HTML()
        self.button = widgets.Button(description="build every figure", icon="play")
        self.assemble([self.picker], after=[self.claims, self.button, self.all_claims])
        self.button.on_click(guard(lambda _b: self.build_all(), self.errors))
        if eager if eager is not None else not self.quick:
            self.build_all()

    def figure(self, name: str) -> BuiltFigure | None:
        """Build (once) and return figure ``name``; None (reason in ``failed``) when it cannot."""
        if name not in self.built and name not in self.failed:
            m = self.modules[name]
            t0 = time.perf_counter()
            try:
                result = m.build(quick=self.quick)
            except (FileNotFoundError, ImportError) as exc:  # missing data or optional package
                self.failed[name] = f"{type(exc).__name__}: {exc}"
                return None
            self.built[name] = BuiltFigure(name, m.TITLE, result, time.perf_counter() - t0)
        return self.built.get(name)

    def build_all(self) -> pl.DataFrame:
        """Build every figure; fill and return the table of all claims."""
        from tqdm.auto import tqdm

        for name in tqdm(list(self.modules), desc="figures", unit="fig"):
            self.figure(name)
        missing = "".join(f"<li>{html.escape(n)}: {html.escape(r)}</li>" for n, r in self.failed.items())
        self.all_claims.value = ("<h4>All claims</h4>"
                                 + claims_html([c for f in self.built.values() for c in f.result.claims])
                                 + (f"<p>Not built:</p><ul>{missing}</ul>" if missing else ""))
        return self.claims_frame()

    def claims_frame(self) -> pl.DataFrame:
        return claims_frame(list(self.built.values()))

    def refresh(self, _change=None) -> None:
        name = self.picker.value
        f = self.figure(name)
        if f is None:
            self.summary.value = f"<b>{html.escape(name)}</b>: not built ({html.escape(self.failed[name])})"
            self.claims.value = ""
            return
        notes = html.escape(f.result.notes) if f.result.notes else ""
        mode = "quick" if self.quick else "full"
        self.summary.value = f"<b>{html.escape(f.title)}</b> <i>({mode} size, built in {f.seconds:.1f} s)</i><br>{notes}"
        self.chart_view.show(f.result.chart)
        self.claims.value = (claims_html(f.result.claims) if f.result.claims
                             else "<i>no published claim for this figure</i>")
