"""Figures and published-claim records for ``tiered-kv reproduce``.

A figure module in :mod:`tiered_kv.viz.figures` exposes ``NAME`` (file stem, e.g.
``"01_kv_bytes"``), ``TITLE`` and ``build(quick: bool) -> FigureResult``. ``build`` computes
everything from the package (model, simulator, measurements); a :class:`Claim` pairs a
published number with the value the code produced and the inputs it used, so REPORT.md can
print the difference. A default tuned to hit a published number is marked ``calibrated``:
then the match is a calibration, not a reproduction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Claim:
    """One published number set beside the value this workbench computes."""

    claim: str  # what was claimed, in words
    source: str  # where it was published
    published: float
    reproduced: float
    unit: str  # e.g. "x", "s", "fraction", "bytes/token"
    inputs: str  # the inputs the reproduced value came from
    calibrated: bool = False  # True when a default was tuned on this very number

    def __post_init__(self) -> None:
        if not self.claim or not self.source:
            raise ValueError("Claim: 'claim' and 'source' must be non-empty")

    @property
    def difference(self) -> float:
        """Reproduced minus published, in the claim's unit."""
        return self.reproduced - self.published

    @property
    def relative_difference(self) -> float:
        """(reproduced - published) / |published|; NaN when published is 0."""
        return self.difference / abs(self.published) if self.published else math.nan


@dataclass
class FigureResult:
    """A built figure: an altair chart, its claims, and the data behind it (for tests)."""

    chart: Any  # altair.Chart / LayerChart / ConcatChart
    claims: list[Claim] = field(default_factory=list)
    data: Any = None  # the polars frame(s) the chart draws
    notes: str = ""  # inputs and caveats shown under the figure in REPORT.md


def format_value(value: float, unit: str) -> str:
    if unit == "fraction":
        return f"{value:.1%}"
    if abs(value) >= 1000:
        return f"{value:,.0f} {unit}"
    return f"{value:.3g} {unit}"


def claims_table(claims: list[Claim]) -> str:
    """Markdown table: claim, source, published, reproduced, difference, inputs, kind."""
    lines = [
        "| claim | source | published | reproduced | difference | inputs | kind |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in claims:
        rel = c.relative_difference
        diff = format_value(c.difference, c.unit) + ("" if math.isnan(rel) else f" ({rel:+.1%})")
        kind = "calibration" if c.calibrated else "reproduction"
        lines.append(
            f"| {c.claim} | {c.source} | {format_value(c.published, c.unit)} | "
            f"{format_value(c.reproduced, c.unit)} | {diff} | {c.inputs} | {kind} |"
        )
    return "\n".join(lines)
