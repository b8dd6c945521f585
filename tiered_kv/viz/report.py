"""Figures and published-claim records for ``tiered-kv reproduce``.

A figure module in :mod:`tiered_kv.viz.figures` exposes ``NAME`` (file stem, e.g. ``"01_kv_bytes"``),
``TITLE`` and ``build(quick: bool) -> FigureResult``, computed from the package. A :class:`Claim`
pairs a published number with the value the code produced, the inputs it used and the public
function (``provenance``) that :func:`run_provenance` calls again. Every claim names its ``kind``,
with no default, because the label is what a reader trusts:

- ``reproduction``: computed by the package from inputs that were not tuned on this number;
- ``calibration``: a default was tuned on this very number (:attr:`Claim.calibrated`);
- ``check``: arithmetic on a published number typed in as an input;
- ``proxy``: a different quantity set beside the published one, so agreement is indicative only.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field, fields
from typing import Any

#: The kinds of match a claim row can be.
KINDS = ("reproduction", "calibration", "check", "proxy")


@dataclass(frozen=True)
class Claim:
    """One published number set beside the value this workbench computes."""

    claim: str  # what was claimed, in words
    source: str  # where it was published
    published: float
    reproduced: float
    unit: str  # e.g. "x", "s", "fraction", "bytes/token"
    inputs: str  # the inputs the reproduced value came from
    #: one of KINDS, always given by keyword (no default: module docstring)
    kind: str = field(kw_only=True)
    #: ("module:function", {keyword inputs}) whose call returns ``reproduced``
    provenance: tuple[str, dict] | None = None

    def __post_init__(self) -> None:
        if not self.claim or not self.source:
            raise ValueError("Claim: 'claim' and 'source' must be non-empty")
        if self.kind not in KINDS:
            raise ValueError(f"Claim.kind: must be one of {list(KINDS)}, got {self.kind!r}")
        if self.provenance is not None:
            fn, kwargs = self.provenance
            if not isinstance(fn, str) or ":" not in fn or not isinstance(kwargs, dict):
                raise ValueError("Claim.provenance: must be ('module:function', {inputs}), "
                                 f"got {self.provenance!r}")

    def to_dict(self) -> dict:
        """JSON-ready record (REPORT's claims.json)."""
        prov = self.provenance
        return {**{f.name: getattr(self, f.name) for f in fields(self)},
                "provenance": None if prov is None else {"function": prov[0], "inputs": prov[1]}}

    @classmethod
    def from_dict(cls, record: dict) -> Claim:
        """The claim a :meth:`to_dict` record describes (a saved REPORT section read back)."""
        prov = record.get("provenance")
        if record.get("kind") not in KINDS:
            raise ValueError(f"claim record {record.get('claim')!r}: 'kind' must be one of {list(KINDS)}, "
                             f"got {record.get('kind')!r}")
        return cls(**{f.name: record[f.name] for f in fields(cls) if f.name != "provenance"},
                   provenance=None if prov is None else (prov["function"], prov["inputs"]))

    @property
    def calibrated(self) -> bool:
        return self.kind == "calibration"

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


def claim_value(function: str, **inputs) -> tuple[str, dict]:
    """The ``provenance`` of a claim whose value ``function`` of :mod:`tiered_kv.viz.claim_values`
    returns from the keyword ``inputs``."""
    return f"tiered_kv.viz.claim_values:{function}", inputs


def run_provenance(provenance: tuple[str, dict] | dict) -> float:
    """Call a claim's provenance (a tuple, or a claims.json record) again and return its value."""
    function, kwargs = (provenance["function"], provenance["inputs"]) if isinstance(provenance, dict) else provenance
    module, _, name = function.partition(":")
    return float(getattr(importlib.import_module(module), name)(**kwargs))


def format_value(value: float, unit: str, digits: int = 3) -> str:
    """``value`` in ``unit`` with ``digits`` significant digits, never in exponent form: fractions as
    percentages (``digits=3``: one decimal), others with thousands separators (``70,272 bytes/token``)."""
    if math.isnan(value):
        return "n/a"
    if unit == "fraction":
        return f"{value:.{max(digits - 2, 0)}%}"
    if value == 0 or not math.isfinite(value):
        return f"{value:g} {unit}"
    decimals = max(digits - 1 - math.floor(math.log10(abs(value))), 0)
    return f"{value:,.{decimals}f} {unit}"


def format_claim(c: Claim) -> tuple[str, str, str]:
    """(published, reproduced, difference) as REPORT.md prints them: both values with as many
    significant digits as it takes to tell them apart (3 to 7: ``437.0 x`` against ``437.2 x``), the
    difference with three and a sign, then the relative difference."""
    digits = 3
    while (digits < 7 and c.published != c.reproduced
           and format_value(c.published, c.unit, digits) == format_value(c.reproduced, c.unit, digits)):
        digits += 1
    rel = c.relative_difference
    if c.unit == "fraction":
        diff = f"{c.difference * 100:+.{_decimals(c.difference * 100)}f} points"
    else:
        diff = ("+" if c.difference > 0 else "") + format_value(c.difference, c.unit)
    if not math.isnan(rel):
        diff += f" ({rel * 100:+.{_decimals(rel * 100)}f}%)"
    return format_value(c.published, c.unit, digits), format_value(c.reproduced, c.unit, digits), diff


def _decimals(x: float) -> int:
    """Decimals that show two significant digits of ``x`` (at least one, at most 6)."""
    if x == 0 or not math.isfinite(x):
        return 1
    return min(max(1 - math.floor(math.log10(abs(x))), 1), 6)


#: The columns of a claims table, in REPORT.md and in the gallery.
CLAIM_COLUMNS = ("claim", "source (publication or expectation)", "published / expected", "reproduced", "difference",
                 "inputs", "kind")


def claim_cells(c: Claim) -> tuple[str, ...]:
    """One claim's cells under :data:`CLAIM_COLUMNS`, formatted as :func:`format_claim` prints them."""
    published, reproduced, diff = format_claim(c)
    return c.claim, c.source, published, reproduced, diff, c.inputs, c.kind


def claims_table(claims: list[Claim]) -> str:
    """Markdown table of :data:`CLAIM_COLUMNS`, one row per claim; a ``|`` or ``\\`` in a cell is
    escaped and a line break folded, so a claim's text cannot end its cell or its row."""
    def cell(text: str) -> str:
        return " ".join(text.splitlines()).replace("\\", "\\\\").replace("|", "\\|")

    rows = ["| " + " | ".join(map(cell, cells)) + " |" for cells in (CLAIM_COLUMNS, *map(claim_cells, claims))]
    return "\n".join([rows[0], "|" + "---|" * len(CLAIM_COLUMNS), *rows[1:]])
