"""The policy arena dashboard (notebook 07): its controls only select a table computed once,
every number shown is what ``tiered_kv.sim.curves.policy_curves`` returns, and a move is fast."""

from __future__ import annotations

import re
import statistics
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tiered_kv.sim import curves as C
from tiered_kv.viz import policy_arena as A

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ("lru", "fifo", "s3fifo", "lfu")


@pytest.fixture(scope="module")
def trace():
    """The notebook's small input: the first 15 minutes of the conversation trace."""
    from tiered_kv.sim.trace_replay import compile_trace
    from tiered_kv.sim.traces import load_trace, shipped_trace

    frame = load_trace(shipped_trace("conversation"))
    seconds = A.SIZES["small"][0]
    return compile_trace(frame.filter(pl.col("timestamp_s") < frame["timestamp_s"].min() + seconds))


@pytest.fixture(scope="module")
def arena(trace):
    return A.build_arena(trace, POLICIES, points=A.SIZES["small"][1], workers=1, title="test arena")


def test_every_number_shown_is_policy_curves_at_the_slider_capacity(arena, trace):
    dash = A.PolicyArenaDashboard(arena)
    caps = arena.capacities
    ref = {adm: C.policy_curves(trace, [*POLICIES, "belady"], caps, admission=adm, workers=1)
           for adm in A.ADMISSIONS}
    for adm in A.ADMISSIONS:
        dash.admission_buttons.value = adm
        for j in (0, len(caps) // 2, len(caps) - 1):
            dash.capacity_slider.value = int(caps[j])
            assert dash.view["capacity_tokens"] == int(caps[j])
            assert dash.hit_rate("belady") == pytest.approx(ref[adm]["belady"]["token_hit_rate"][j], abs=0)
            for row in dash.view["rows"][1:]:
                want = ref[adm][row["policy"]]
                assert row["token_hit_rate"] == want["token_hit_rate"][j]
                assert row["ssd_bytes_written"] == want["ssd_bytes_written"][j]
                assert row["below_belady"] >= -1e-12  # Belady bounds every policy
            assert f'{dash.view["rows"][1]["token_hit_rate"]:.2%}' in dash.summary.value
    assert not dash.errors.value


def test_controls_replay_nothing(arena, monkeypatch):
    """After the precompute, moving any control never calls the simulator."""
    dash = A.PolicyArenaDashboard(arena)

    def boom(*_a, **_k):
        raise AssertionError("a control move replayed a policy")

    monkeypatch.setattr(C, "policy_curves", boom)
    monkeypatch.setattr(A, "arena_table", boom)
    before = dash.chart_view.redraws
    dash.policy_select.value = ("fifo",)
    dash.admission_buttons.value = "second-sighting"
    for c in arena.capacities:
        dash.capacity_slider.value = int(c)
    assert not dash.errors.value, dash.errors.value
    assert dash.chart_view.redraws == before + 2 + len(arena.capacities)  # the slider starts mid-grid
    assert [r["policy"] for r in dash.view["rows"]] == ["belady", "fifo"]
    shown = {r["policy"] for r in dash.chart_view.spec["datasets"]["curves"]}
    assert shown == {A.BOUND, "fifo"}


def test_a_capacity_move_redraws_in_under_200_ms(arena):
    """End to end in the kernel: select rows, render the table, hand the chart its new data."""
    dash = A.PolicyArenaDashboard(arena)
    times = []
    for c in [*arena.capacities[::-1], *arena.capacities]:
        t0 = time.perf_counter()
        dash.capacity_slider.value = int(c)
        times.append(time.perf_counter() - t0)
    assert statistics.median(times) < 0.2, times


def test_second_sighting_writes_less_and_belady_is_the_same_under_both(arena):
    all_ = A.arena_view(arena, POLICIES, "all", arena.capacities[-1])
    ss = A.arena_view(arena, POLICIES, "second-sighting", arena.capacities[-1])
    a, b = all_["rows"][0], ss["rows"][0]
    assert a["policy"] == b["policy"] == "belady"
    assert np.array_equal([a[k] for k in list(a)[1:]], [b[k] for k in list(b)[1:]], equal_nan=True)
    data = arena.data
    for p in POLICIES:
        w = {adm: data.filter((pl.col("policy") == p) & (pl.col("admission") == adm))["ssd_bytes_written"].sum()
             for adm in A.ADMISSIONS}
        assert w["second-sighting"] < w["all"], p


def test_slider_snaps_to_the_grid_and_bad_choices_are_named(arena):
    caps = arena.capacities
    assert arena.snap(caps[3] * 1.01) == caps[3]
    with pytest.raises(ValueError, match=r"policies: \['arcc'\] were not precomputed"):
        A.arena_view(arena, ["arcc"], "all", caps[0])
    with pytest.raises(ValueError, match=r"admission: must be one of \['all', 'second-sighting'\]"):
        A.arena_view(arena, ["lru"], "sometimes", caps[0])
    with pytest.raises(ValueError, match="at least one policy"):
        A.build_arena(None, ["belady"])
    with pytest.raises(ValueError, match="admissions"):
        A.build_arena(None, ["lru"], admissions=["never"])


def test_a_failing_redraw_shows_in_the_error_box(arena):
    dash = A.PolicyArenaDashboard(arena)
    arena_frames = dict(arena.frames)
    try:
        arena.frames.pop("second-sighting")
        dash.admission_buttons.value = "second-sighting"
        assert "could not redraw" in dash.errors.value and "admission" in dash.errors.value
    finally:
        arena.frames.update(arena_frames)
    dash.admission_buttons.value = "all"
    assert not dash.errors.value


def test_nothing_selected_shows_belady_alone(arena):
    dash = A.PolicyArenaDashboard(arena, policies=())
    assert [r["policy"] for r in dash.view["rows"]] == ["belady"]
    assert not dash.errors.value


@pytest.mark.slow
def test_chart_template_builds_and_renders(arena):
    view = A.arena_view(arena, POLICIES, "all", arena.capacities[2])
    chart = A.arena_chart(arena, view)
    assert len(chart.to_dict()["hconcat"]) == 2
    bundle = A.PolicyArenaDashboard(arena)._repr_mimebundle_()
    assert bundle["image/svg+xml"].lstrip().startswith("<svg")


def _docs_example() -> str:
    text = (ROOT / "docs" / "policies.md").read_text()
    return re.search(r"## Writing a policy.*?```python\n(.*?)```", text, re.S).group(1)


@pytest.mark.slow
def test_notebook_plugin_file_is_the_docs_example_and_runs_in_the_arena(trace):
    path = ROOT / "notebooks" / "mru_policy.py"
    assert _docs_example().strip() in path.read_text()
    spec = f"{path}:MRU"
    arena = A.build_arena(trace, ["lru", spec], points=4, admissions=["all"], workers=1)
    view = A.arena_view(arena, ["lru", spec], "all", arena.capacities[-1])
    ref = C.policy_curves(trace, [spec], arena.capacities, workers=1)[spec]
    assert [r["policy"] for r in view["rows"]] == ["belady", "lru", spec]
    assert view["rows"][2]["token_hit_rate"] == ref["token_hit_rate"][-1]
    assert np.isfinite(view["rows"][2]["ssd_bytes_written"])
