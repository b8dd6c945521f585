"""What every benchmark's record shares: its stopwatch (:func:`clocked`), how a figure and its
spread are written, and the two shapes a benchmark declares (:class:`Page`, its section of
BENCHMARKS.md; :class:`Row`, its line of the summary table).

A page is rendered from its JSON alone, so re-rendering the committed JSON gives the committed
page and nothing in it can be typed by hand. Statistics are medians of interleaved repeats with
their range, never a best-of (on a shared machine, that is whichever run the neighbours
spared). A ratio against a baseline is taken per paired repeat (the path and the baseline timed
one after the other) and the median of those ratios reported with their range: a ratio of the
two medians pairs runs that were not timed together, and a repeat that went badly on one side
only (a 0.26x beside 0.9x) disappears into it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Fmt = Callable[[float], str]

#: The machine note of a record that names none, on a page without a note of its own: it claims
#: nothing about a machine the recorder did not see.
NO_MACHINE_NOTE = "no note on the machine or its load was given when it was recorded"


def clocked(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """``(fn(*args), wall seconds it took)``."""
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def traced(frame: Callable[[], Any]) -> tuple[Any, float, float]:
    """(compiled trace, seconds making its frame, seconds compiling it) of the frame ``frame()`` makes."""
    from tiered_kv.sim.trace_replay import compile_trace

    df, make_s = clocked(frame)
    trace, compile_s = clocked(compile_trace, df)
    return trace, make_s, compile_s


def ms(x: float) -> str:
    return f"{1e3 * x:,.1f} ms" if x < 1 else f"{x:,.2f} s"


def sec(x: float) -> str:
    return f"{x:,.3f} s" if x < 10 else f"{x:,.1f} s"


def brief(x: float) -> str:
    """Seconds as the summary table writes them: whole milliseconds below one second."""
    return f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.2f} s" if x < 100 else f"{x:,.0f} s"


def ratio(x: float) -> str:
    return f"{x:.3f}x" if x < 1 else f"{x:.2f}x" if x < 10 else f"{x:,.1f}x"


def yes(ok: bool) -> str:
    return "yes" if ok else "no"


def met(ok: bool) -> str:
    """``yes``, or a bold ``no`` that a reader of a long table does not miss."""
    return "yes" if ok else "**no**"


def spread(values: Sequence[float], fmt: Fmt) -> str:
    """``median (min-max, n runs)`` of ``values``; just the value for a single run."""
    vals = [float(v) for v in values]
    if not vals:
        return "-"
    med = statistics.median(vals)
    if len(vals) == 1:
        return f"{fmt(med)} (1 run)"
    return f"{fmt(med)} ({fmt(min(vals))}-{fmt(max(vals))}, {len(vals)} runs)"


def every_run(d: dict, key: str) -> list[float]:
    """Every run of ``d[key]`` as the JSON keeps them (``<key>_all``), or the median alone from a
    JSON written before the runs were kept."""
    return d[f"{key}_all"] if f"{key}_all" in d else [d[key]]


@dataclass(frozen=True)
class Paired:
    """The median of per-repeat ratios with their range and count."""

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, ratios: Sequence[float]) -> Paired:
        vals = [float(r) for r in ratios]
        if not vals:
            raise ValueError("a paired ratio needs at least one repeat")
        return cls(statistics.median(vals), min(vals), max(vals), len(vals))

    @classmethod
    def between(cls, num: Sequence[float], den: Sequence[float]) -> Paired:
        """``num[i] / den[i]`` of paired repeats (a baseline and the path timed beside it): a
        repeat without its partner is not a pair."""
        if len(num) != len(den):
            raise ValueError(f"paired ratios need as many baseline runs as path runs, got {len(num)} and {len(den)}")
        return cls.of([a / b for a, b in zip(num, den, strict=True) if b > 0])

    def text(self, fmt: Fmt = ratio, bold: bool = False) -> str:
        """``0.78x (0.26x-0.91x, 5 pairs)``: the median, then the repeats' own range."""
        med = f"**{fmt(self.median)}**" if bold else fmt(self.median)
        if self.n == 1:
            return f"{med} (1 pair)"
        return f"{med} ({fmt(self.low)}-{fmt(self.high)}, {self.n} pairs)"


@dataclass(frozen=True)
class Page:
    """One section of BENCHMARKS.md: ``benchmarks/results/<name>.md`` from ``<name>.json``.

    ``body`` gets the JSON (with its ``recorded`` entry: the command and machine note) and, for
    each name in ``extra``, that JSON or None when it is missing; ``command`` is what ``tiered-kv
    bench record`` stores when it is given none; ``machine`` is the page's own note for a JSON
    that names none (None: it has none; :func:`recorded`). With a ``title``, the body is set in
    the standard frame: the title, the JSON and the command it comes from, the machine note, the
    body; without, it is the whole page."""

    name: str
    body: Callable[..., str]
    command: str
    extra: tuple[str, ...] = ()
    title: str = ""
    machine: str | None = None

    def render(self, *data: dict | None) -> str:
        if not self.title:
            return self.body(*data)
        command, machine = recorded(data[0], self.command, self.machine)
        return f"""# {self.title}

Written by `tiered-kv bench record {self.name}` from `benchmarks/results/{self.name}.json`, the JSON of one run of:

```bash
{command}
```

Machine: {machine}

{self.body(*data)}
"""


@dataclass(frozen=True)
class Row:
    """One line of the summary table: the JSONs it reads (the first names the command) and how."""

    area: str
    files: tuple[str, ...]
    target: Callable[..., str]                  # the goal, from the JSONs when they carry it
    figure: Callable[..., tuple[str, str]]      # (measured, met?) from the loaded JSONs
    pending: str = ""  # the command still to run when its JSON is missing ("" reads "no result")


def recorded(r: dict, default_command: str, own_machine: str | None = None) -> tuple[str, str]:
    """(command, machine note) of a record: what its JSON names, else ``default_command`` and the
    page's own note, else :data:`NO_MACHINE_NOTE` (an empty note, ``--machine ""``, is none)."""
    rec = r.get("recorded") or {}
    return rec.get("command") or default_command, rec.get("machine") or own_machine or NO_MACHINE_NOTE
