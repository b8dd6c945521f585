"""The record of ``tiered-kv bench widgets`` (the retention dashboard's slider redraw): its page
and its summary line, rendered from the JSON of :mod:`tiered_kv.viz.retention_timing` (why it sits
there: :mod:`tiered_kv.bench`).
"""

from __future__ import annotations

from tiered_kv.bench._pages import Page, Row, ratio, sec, yes


def _row(name: str, d: dict) -> str:
    return f"| {name} | {d['p50_ms']:,.1f} | {d['p95_ms']:,.1f} | {d['max_ms']:,.1f} | {d['n']} |"


def render_record(r: dict) -> str:
    """The dashboard section from the JSON of one ``tiered-kv bench widgets --json`` run."""
    return "\n".join([
        f"Trace `{r['trace']}` ({r['requests']:,} requests, {r['block_lookups']:,} block lookups, "
        f"{r['table_rows']:,} table rows). One-time table build {sec(r['build_s'])} (numba warm-up "
        f"{sec(r['jit_warmup_s'])}, not in it). A move = setting a slider's value from Python: evaluate, "
        "summary table, chart spec handed to the widget (the browser's render is not included).", "",
        "| measurement | p50 (ms) | p95 (ms) | max (ms) | samples |", "|---|---:|---:|---:|---:|",
        _row("slider move, end to end in the kernel", r["move"]),
        _row("evaluate only", r["evaluate"]),
        _row("baseline: one event replay (the point only)", r["baseline_one_replay"]),
        _row(f"baseline: the whole view by event replays ({r['view_points']} points)", r["baseline_view_by_replays"]),
        "",
        f"Target: a move under {r['target_ms']:g} ms at p95: **{'met' if r['meets_target_p95'] else 'not met'}** "
        f"(p95 {r['move']['p95_ms']:,.1f} ms). The view by table is "
        f"{ratio(r['speedup_view_evaluate_vs_replays'])} faster than by replays (p50 over p50: the "
        f"{r['baseline_view_by_replays']['n']} views by replays and the {r['evaluate']['n']} evaluations are "
        "different samples, not pairs)."])


def _summary(w: dict) -> tuple[str, str]:
    return (f"p50 {w['move']['p50_ms']:.0f} ms, p95 {w['move']['p95_ms']:.0f} ms "
            f"({ratio(w['speedup_view_evaluate_vs_replays'])} faster than replays, p50 over p50)"), \
        yes(w["meets_target_p95"])


PAGES = (Page("widgets", render_record, "tiered-kv bench widgets --json",
              title="Retention dashboard slider redraw (`tiered-kv bench widgets`)"),)
SUMMARY = (Row("dashboard slider redraw, real trace", ("widgets",), lambda w: f"p95 < {w['target_ms']:g} ms (issue 7)",
               _summary),)
