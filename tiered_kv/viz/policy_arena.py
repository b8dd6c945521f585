"""The policy arena: every policy's hit rate and SSD wear at every capacity, computed once.

:func:`arena_table` replays each policy under each admission filter into one long frame, which
figure 16 and notebook 07 draw from; :func:`summary` says which policy wins where, how far each
is from Belady, and what admit-on-second-sighting saves in writes and costs in hits. The
notebook's dashboard (:class:`PolicyArenaDashboard`) only selects rows of that frame on a
control change (:func:`arena_view`) and swaps the chart's data in place, so a redraw costs
milliseconds.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

import altair as alt
import ipywidgets as widgets
import numpy as np
import polars as pl

from tiered_kv.units import DEFAULT_BYTES_PER_TOKEN, format_bytes, format_tokens
from tiered_kv.viz.widgets import Dashboard, html_table, records, slider, table_css

#: The policies the arena shows by default (``belady`` is drawn as the bound).
POLICIES = ("lru", "fifo", "lfu", "arc", "slru", "2q", "s3fifo", "sieve", "gdsf")
ADMISSIONS = ("all", "second-sighting")
BOUND = "Belady (bound)"


def load(trace_name: str):
    """The compiled shipped trace (or trace file), from the compiled-trace cache when it holds it."""
    from tiered_kv.sim.trace_cache import load_compiled_trace
    from tiered_kv.sim.traces import resolve_trace_path

    return load_compiled_trace(resolve_trace_path(trace_name))


def arena_table(trace, caps: np.ndarray, policies=POLICIES, *, admissions=ADMISSIONS,
                workers: int = 1) -> pl.DataFrame:
    """Long frame at the capacities ``caps`` (tokens): policy, admission, capacity_tokens, capacity_bytes
    (at :data:`~tiered_kv.units.DEFAULT_BYTES_PER_TOKEN`), token_hit_rate, ssd_bytes_written,
    bytes_written_per_hit_byte, drive_writes_per_day; Belady's rows have admission ``"bound"`` (the
    same under every filter: it bypasses) and its own writes (misses it keeps; it never writes a
    block it bypasses or one never used again)."""
    from tiered_kv.sim import curves as C

    bpt = float(DEFAULT_BYTES_PER_TOKEN)
    parts = []
    specs = [p for p in policies if p != "belady"]
    for adm in admissions:
        out = C.policy_curves(trace, specs + (["belady"] if adm == admissions[0] else []), caps, admission=adm,
                              bytes_per_token=bpt, workers=workers)
        for spec, d in out.items():
            is_bound = spec == "belady"
            parts.append(pl.DataFrame({
                "policy": BOUND if is_bound else spec,
                "admission": "bound" if is_bound else adm,
                "capacity_tokens": np.asarray(caps, dtype=np.int64),
                "token_hit_rate": np.asarray(d["token_hit_rate"], dtype=np.float64),
                "ssd_bytes_written": [math.nan if w is None else float(w) for w in d["ssd_bytes_written"]],
                **{k: [float(w) if _finite(w) else math.nan for w in d[k]]
                   for k in ("bytes_written_per_hit_byte", "drive_writes_per_day")},
            }))
    return pl.concat(parts).with_columns((pl.col("capacity_tokens") * bpt).alias("capacity_bytes"))


def summary(data: pl.DataFrame) -> dict:
    """Winners per capacity, distance from Belady, and second-sighting's trade (admit-all baseline)."""
    base = data.filter(pl.col("admission") == "all")
    bound = data.filter(pl.col("admission") == "bound").select("capacity_tokens", pl.col("token_hit_rate")
                                                              .alias("belady"))
    wins = []
    for cap, grp in base.group_by("capacity_tokens", maintain_order=True):
        best = grp.sort(["token_hit_rate", "policy"], descending=[True, False]).row(0, named=True)
        tied = sorted(grp.filter(pl.col("token_hit_rate") >= best["token_hit_rate"] - 1e-12)["policy"].to_list())
        wins.append({"capacity_tokens": int(cap[0]), "capacity_bytes": best["capacity_bytes"], "winners": tied,
                     "token_hit_rate": best["token_hit_rate"]})
    gap = base.join(bound, on="capacity_tokens").with_columns((pl.col("belady") - pl.col("token_hit_rate"))
                                                              .alias("gap"))
    dist = gap.group_by("policy", maintain_order=True).agg(pl.col("gap").mean().alias("mean_gap"),
                                                           pl.col("gap").max().alias("max_gap"))
    trade = []
    ss = data.filter(pl.col("admission") == "second-sighting")
    if ss.height:
        j = base.join(ss, on=["policy", "capacity_tokens"], suffix="_ss")
        for pol, grp in j.group_by("policy", maintain_order=True):
            w_all, w_ss = float(grp["ssd_bytes_written"].sum()), float(grp["ssd_bytes_written_ss"].sum())
            change = grp["token_hit_rate_ss"] - grp["token_hit_rate"]
            trade.append({"policy": pol[0], "written_ratio": w_ss / w_all if w_all else math.nan,
                          **{f"{k}_hit_change": float(getattr(change, k)()) for k in ("mean", "min", "max")}})
    return {"wins": wins, "distance": dist.to_dicts(), "second_sighting": trade}


# --- the arena dashboard (notebook 07) --------------------------------------------------------

#: Colours of the policies (Tableau 10); Belady is drawn in near-black, dashed.
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")
#: Notebook sizes: (seconds of the conversation trace from its start, None for all of it; capacities;
#: worker processes). One process at small size: loading the zoo's compiled kernels in fresh
#: workers costs more than the replays themselves.
SIZES = {"small": (900.0, 8, 1), "full": (None, 24, 2)}


@dataclass(eq=False)
class Arena:
    """Every policy's curves on one trace, computed once (:func:`build_arena`); ``frames[admission]``
    holds that admission's rows plus Belady's, so a view is two filters of a few hundred rows."""

    data: pl.DataFrame
    capacities: np.ndarray  # tokens, the grid every policy was replayed at
    policies: tuple[str, ...]
    admissions: tuple[str, ...]
    title: str
    info: dict
    frames: dict[str, pl.DataFrame] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bound = self.data.filter(pl.col("admission") == "bound")
        for adm in self.admissions:
            self.frames[adm] = pl.concat([bound, self.data.filter(pl.col("admission") == adm)]).sort(
                ["policy", "capacity_tokens"])

    def snap(self, capacity_tokens: float) -> int:
        """The grid capacity nearest ``capacity_tokens`` in log space."""
        caps = self.capacities
        i = int(np.argmin(np.abs(np.log(caps) - math.log(max(float(capacity_tokens), 1.0)))))
        return int(caps[i])


def build_arena(trace, policies=POLICIES, *, points: int = 24, admissions=ADMISSIONS, workers: int = 1,
                title: str = "") -> Arena:
    """The slow part, once: :func:`arena_table` of ``trace`` (compiled, or a trace frame) at ``points``
    capacities; ``policies`` may name plug-in files (``path/to/file.py:Class``, docs/policies.md)."""
    from tiered_kv.sim.curves import default_capacities
    from tiered_kv.sim.trace_replay import CompiledTrace, compile_trace

    policies = tuple(dict.fromkeys(p for p in policies if p != "belady"))
    if not policies:
        raise ValueError("policies: name at least one policy besides belady (the bound is always drawn)")
    admissions = tuple(admissions)
    bad = [a for a in admissions if a not in ADMISSIONS]
    if bad or not admissions:
        raise ValueError(f"admissions: each must be one of {list(ADMISSIONS)}, got {list(admissions)}")
    if not isinstance(trace, CompiledTrace):
        trace = compile_trace(trace)
    caps = default_capacities(trace, points)
    data = arena_table(trace, caps, policies, admissions=admissions, workers=workers)
    span = float(trace.timestamps[-1] - trace.timestamps[0]) if trace.n_requests else 0.0
    info = {"requests": int(trace.n_requests), "accesses": int(trace.n_accesses),
            "block_size": int(trace.uniform_block_size), "span_s": span}
    return Arena(data=data, capacities=np.asarray(caps, dtype=np.int64), policies=policies, admissions=admissions,
                 title=title, info=info)


def arena_view(arena: Arena, policies, admission: str, capacity_tokens: float) -> dict:
    """What the dashboard shows for one setting, selected from the precomputed frames: the capacity
    snapped to the grid, ``curves`` (the chosen policies and Belady at every capacity), ``marks``
    (their rows at the capacity) and ``rows`` (the summary table's numbers, Belady first)."""
    if admission not in arena.frames:
        raise ValueError(f"admission: must be one of {list(arena.admissions)}, got {admission!r}")
    chosen = list(policies)
    unknown = [p for p in chosen if p not in arena.policies]
    if unknown:
        raise ValueError(f"policies: {unknown} were not precomputed (this arena has {list(arena.policies)})")
    cap = arena.snap(capacity_tokens)
    frame = arena.frames[admission]
    curves = frame.filter(pl.col("policy").is_in([BOUND, *chosen]))
    marks = curves.filter(pl.col("capacity_tokens") == cap)
    by_policy = {r["policy"]: r for r in marks.iter_rows(named=True)}
    bound = by_policy[BOUND]["token_hit_rate"]
    rows = []
    for p in (BOUND, *chosen):
        r = by_policy[p]
        rows.append({"policy": "belady" if p == BOUND else p, "token_hit_rate": r["token_hit_rate"],
                     "below_belady": bound - r["token_hit_rate"], "ssd_bytes_written": r["ssd_bytes_written"],
                     "bytes_written_per_hit_byte": r["bytes_written_per_hit_byte"],
                     "drive_writes_per_day": r["drive_writes_per_day"]})
    return {"admission": admission, "policies": chosen, "capacity_tokens": cap,
            "capacity_bytes": float(cap * DEFAULT_BYTES_PER_TOKEN), "curves": curves, "marks": marks, "rows": rows}


def wear_points(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows a log axis of drive writes per day can draw (finite and above zero)."""
    return frame.filter(pl.col("drive_writes_per_day").is_finite() & (pl.col("drive_writes_per_day") > 0))


def arena_datasets(view: dict) -> dict[str, list[dict]]:
    """The named data sources of :func:`arena_template` at one setting (JSON rows)."""
    cols = ["policy", "capacity_tokens", "capacity_bytes", "token_hit_rate", "drive_writes_per_day",
            "bytes_written_per_hit_byte"]
    curves, marks = view["curves"].select(cols), view["marks"].select(cols)
    return {"curves": records(curves), "marks": records(marks),
            "wear": records(wear_points(curves)), "wear_marks": records(wear_points(marks)),
            "capacity": [{"capacity_tokens": view["capacity_tokens"]}]}


def arena_template(arena: Arena) -> alt.HConcatChart:
    """Hit rate vs capacity per policy (Belady dashed) and the wear frontier (drive writes per day
    vs hit rate), with a marker at the slider's capacity on both (named data sources: a redraw
    swaps the data only)."""
    order = [BOUND, *arena.policies]
    palette = [PALETTE[i % len(PALETTE)] for i in range(len(arena.policies))]
    color = alt.Color("policy:N", title="policy", scale=alt.Scale(domain=order, range=["#222222", *palette]),
                      sort=order)
    dash = alt.condition(alt.datum.policy == BOUND, alt.value([5, 4]), alt.value([1, 0]))
    x_cap = alt.X("capacity_tokens:Q", title="SSD capacity (tokens, log scale)",
                  scale=alt.Scale(type="log", domain=[float(arena.capacities[0]), float(arena.capacities[-1])]))
    y_hit = alt.Y("token_hit_rate:Q", title="token hit rate", axis=alt.Axis(format="%"))
    tip = ["policy:N", alt.Tooltip("capacity_tokens:Q", format=",", title="capacity (tokens)"),
           alt.Tooltip("capacity_bytes:Q", format=".3s", title="capacity (bytes)"),
           alt.Tooltip("token_hit_rate:Q", format=".2%"),
           alt.Tooltip("drive_writes_per_day:Q", format=".3s", title="drive writes per day"),
           alt.Tooltip("bytes_written_per_hit_byte:Q", format=".3s", title="bytes written per hit byte")]
    curve = alt.layer(
        alt.Chart(alt.Data(name="curves")).mark_line().encode(x_cap, y_hit, color=color, strokeDash=dash,
                                                              tooltip=tip),
        alt.Chart(alt.Data(name="capacity")).mark_rule(color="#888").encode(x_cap),
        alt.Chart(alt.Data(name="marks")).mark_point(size=70, filled=True).encode(x_cap, y_hit, color=color,
                                                                                  tooltip=tip),
    ).properties(width=380, height=280, title="hit rate vs capacity (dashed: Belady, the bound)")
    x_hit = alt.X("token_hit_rate:Q", title="token hit rate", axis=alt.Axis(format="%"))
    y_wear = alt.Y("drive_writes_per_day:Q", scale=alt.Scale(type="log"),
                   title="SSD drive writes per day (log scale)")
    wear = alt.layer(
        alt.Chart(alt.Data(name="wear")).mark_line(opacity=0.6).encode(
            x_hit, y_wear, color=color, strokeDash=dash, order="capacity_tokens:Q", tooltip=tip),
        alt.Chart(alt.Data(name="wear_marks")).mark_point(size=90, filled=True).encode(
            x_hit, y_wear, color=color, tooltip=tip),
    ).properties(width=380, height=280, title="wear frontier: writes/day vs hit rate (dots: this capacity)")
    title = alt.TitleParams(arena.title or "policy arena", anchor="start", offset=12)
    return alt.hconcat(curve, wear).properties(title=title)


def arena_chart(arena: Arena, view: dict) -> alt.HConcatChart:
    """The dashboard's chart with its data inlined (for saving as SVG/PNG)."""
    spec = arena_template(arena).to_dict()
    spec["datasets"] = arena_datasets(view)
    return alt.HConcatChart.from_dict(spec)


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v)


def summary_rows(view: dict) -> list[dict]:
    """The table under the controls: per policy at the capacity, Belady first."""
    def pct(v):
        return f"{v:.2%}" if _finite(v) else ""

    def num(v, fmt=lambda v: format(v, ".3g")):
        return fmt(v) if _finite(v) else "n/a"

    return [{"policy": r["policy"], "token hit rate": pct(r["token_hit_rate"]),
             "below Belady": "" if r["policy"] == "belady" else pct(r["below_belady"]),
             "SSD bytes written": num(r["ssd_bytes_written"], format_bytes),
             "written per hit byte": num(r["bytes_written_per_hit_byte"]),
             "drive writes per day": num(r["drive_writes_per_day"])} for r in view["rows"]]


def summary_line(view: dict) -> str:
    """One line: the capacity, the best chosen policy there and its distance from Belady."""
    rows = [r for r in view["rows"] if r["policy"] != "belady"]
    text = (f"At {format_tokens(view['capacity_tokens'])} ({format_bytes(view['capacity_bytes'])} at "
            f"{DEFAULT_BYTES_PER_TOKEN:,} B/token), admission {view['admission']}: Belady "
            f"{view['rows'][0]['token_hit_rate']:.2%}")
    if rows:
        top = max(r["token_hit_rate"] for r in rows)
        best = [r["policy"] for r in rows if r["token_hit_rate"] >= top - 1e-12]
        names = ", ".join(best) if len(best) <= 3 else f"{', '.join(best[:3])} and {len(best) - 3} more (tied)"
        text += f"; best of the chosen: {names} at {top:.2%}, {view['rows'][0]['token_hit_rate'] - top:.2%} below"
    return text + "."


class PolicyArenaDashboard(Dashboard):
    """Policy choice, admission filter and a capacity slider over a precomputed :class:`Arena`
    (:func:`conversation_arena` in notebook 07); ``view`` is the dict of the last redraw (:func:`arena_view`)."""

    def __init__(self, arena: Arena, *, policies=None) -> None:
        self.arena = a = arena
        self.policy_select = widgets.SelectMultiple(
            options=list(a.policies), value=tuple(policies if policies is not None else a.policies),
            rows=min(len(a.policies), 10), description="policies", style={"description_width": "initial"})
        self.admission_buttons = widgets.ToggleButtons(
            options=list(a.admissions), value=a.admissions[0], description="admission",
            style={"description_width": "initial", "button_width": "130px"})
        labels = [(f"{format_tokens(c)} ({format_bytes(c * DEFAULT_BYTES_PER_TOKEN)})", int(c)) for c in a.capacities]
        self.capacity_slider = slider(widgets.SelectionSlider, "SSD capacity", options=labels,
                                      value=int(a.capacities[len(a.capacities) // 2]),
                                      continuous_update=True, width="560px")
        self.template = arena_template(a)
        controls = widgets.HBox([self.policy_select, widgets.VBox([self.admission_buttons, self.capacity_slider])])
        self.assemble([self.policy_select, self.admission_buttons, self.capacity_slider], [controls])

    def refresh(self, _change=None) -> None:
        self.view = arena_view(self.arena, self.policy_select.value, self.admission_buttons.value,
                               self.capacity_slider.value)
        table = html_table(summary_rows(self.view), css_class="tkv-arena",
                           cell_classes={"token hit rate": "tkv-arena-hit"})
        line = html.escape(summary_line(self.view))
        self.summary.value = f'{table_css("tkv-arena")}<div class="tkv-arena-line">{line}</div>{table}'
        self.chart_view.show_data(self.template, arena_datasets(self.view))

    def hit_rate(self, policy: str) -> float:
        """Token hit rate of ``policy`` (or ``"belady"``) at the current setting."""
        for r in self.view["rows"]:
            if r["policy"] == policy:
                return float(r["token_hit_rate"])
        raise KeyError(f"{policy!r} is not shown (shown: {[r['policy'] for r in self.view['rows']]})")


def conversation_arena(size: str | None = None, policies=POLICIES) -> Arena:
    """The arena of the shipped Mooncake conversation trace (its first 15 minutes at small size)."""
    from tiered_kv.viz import notebook_size

    seconds, n, procs = SIZES[notebook_size(size)]
    if seconds is None:
        trace, what = load("conversation"), "Mooncake conversation trace (one hour)"
    else:
        from tiered_kv.sim.traces import load_trace, shipped_trace

        frame = load_trace(shipped_trace("conversation"))
        trace = frame.filter(pl.col("timestamp_s") < frame["timestamp_s"].min() + seconds)
        what = f"Mooncake conversation trace (first {seconds / 60:g} minutes)"
    return build_arena(trace, policies, points=n, workers=procs, title=f"policy arena: {what}")


def arena_summary(arena: Arena) -> dict[str, pl.DataFrame]:
    """:func:`summary` of the arena as frames: ``wins`` (best policy per capacity), ``distance``
    (mean and max distance below Belady per policy) and ``second_sighting`` (its writes as a
    share of admit-all's, and the hit-rate change)."""
    s = summary(arena.data)
    wins = pl.DataFrame([{**w, "winners": ", ".join(w["winners"])} for w in s["wins"]])
    return {"wins": wins, "distance": pl.DataFrame(s["distance"]).sort("mean_gap"),
            "second_sighting": pl.DataFrame(s["second_sighting"]) if s["second_sighting"] else pl.DataFrame()}
