"""`tiered-kv bench record`: every page and the summary are rendered from the committed JSONs,
each figure follows its JSON, and the statistics are the ones asked for: ratios against a
baseline per paired repeat (median and range), checked on small inputs worked out by hand."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tiered_kv.bench import _summary, cluster_model, record
from tiered_kv.bench._pages import NO_MACHINE_NOTE, Paired
from tiered_kv.cli import main

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
COMMITTED = sorted(n for n, p in record.pages().items() if (RESULTS / f"{n}.json").exists())


def _rows(text: str) -> dict[str, list[str]]:
    """Table rows of SUMMARY.md by area: [command, measured, target, met?]."""
    out = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| area"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            out[cells[0]] = cells[1:]
    return out


def _shift_floats(obj):
    """Every float x in a JSON tree made 1.37 x^1.1 + 0.011 (negative ones 1.37 x + 0.011; bools
    and integers left alone): not a pure scaling, so ratios between measured floats, the paired
    per-repeat ratios included, change too."""
    if isinstance(obj, dict):
        return {k: _shift_floats(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_shift_floats(v) for v in obj]
    if not isinstance(obj, float):
        return obj
    return 1.37 * obj ** 1.1 + 0.011 if obj > 0 else obj * 1.37 + 0.011


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A checkout-shaped copy of the committed records that a test may change."""
    shutil.copytree(RESULTS, tmp_path / "benchmarks" / "results")
    return tmp_path


def test_every_page_is_recorded_and_every_record_has_its_page():
    assert {"kernels", "store", "store_s3", "peers", "retention", "widgets", "synth", "sim", "sim_cli", "ttft",
            "ttft_short", "policies", "contention", "engine", "cluster"} <= set(COMMITTED)


@pytest.mark.parametrize("name", COMMITTED)
def test_committed_page_is_what_its_json_renders(name: str):
    page = record.pages()[name]
    assert (RESULTS / f"{name}.md").read_text() == record.render(page, RESULTS), \
        f"{name}.md is not what its JSON renders: run `tiered-kv bench record all`"


@pytest.mark.parametrize("name", COMMITTED)
def test_page_follows_its_json(name: str, root: Path):
    results = root / "benchmarks" / "results"
    page = record.pages()[name]
    before = record.render(page, results)
    path = results / f"{name}.json"
    path.write_text(json.dumps(_shift_floats(json.loads(path.read_text()))))
    assert record.render(page, results) != before


def test_committed_summary_and_benchmarks_are_the_assembled_ones(root: Path):
    record.assemble(root)
    assert (ROOT / "benchmarks" / "SUMMARY.md").read_text() == (root / "benchmarks" / "SUMMARY.md").read_text(), \
        "benchmarks/SUMMARY.md is stale: run `tiered-kv bench record all`"
    assert (ROOT / "BENCHMARKS.md").read_text() == (root / "BENCHMARKS.md").read_text(), \
        "BENCHMARKS.md is stale: run `tiered-kv bench record all`"


def test_every_measured_figure_follows_its_json(root: Path):
    results = root / "benchmarks" / "results"
    before = _rows(_summary.render(results))
    for p in results.glob("*.json"):
        p.write_text(json.dumps(_shift_floats(json.loads(p.read_text()))))
    after = _rows(_summary.render(results))
    for row, _ in _summary.rows():
        if all((RESULTS / f"{s}.json").exists() for s in row.files):
            assert after[row.area][1] != before[row.area][1], f"{row.area}: measured figure not from its JSON"


# --- paired ratios, by hand ---------------------------------------------------------------------
def test_paired_ratio_is_the_median_of_per_repeat_ratios_not_a_ratio_of_medians():
    raw, tier = [1.0, 3.0, 2.0], [2.0, 1.0, 4.0]  # per repeat 0.5, 3, 0.5; medians 2 / 2 = 1
    p = Paired.between(raw, tier)
    assert (p.median, p.low, p.high, p.n) == (0.5, 0.5, 3.0, 3)
    assert p.text() == "0.500x (0.500x-3.00x, 3 pairs)"
    with pytest.raises(ValueError, match="as many baseline runs"):
        Paired.between([1.0, 2.0], [1.0])


def _store_json(raw: list[float], put: list[float]) -> dict:
    fixed = [1.0] * len(raw)
    return {"sizes": {"model": {"bytes_per_token": 136.0, "seconds_all": {
        "raw_write": raw, "put": put, "raw_read_warm": fixed, "get_warm": fixed,
        "raw_read_cold": fixed, "get_cold": fixed}}}}


def test_store_summary_reads_paired_repeats(root: Path):
    results = root / "benchmarks" / "results"
    (results / "store.json").write_text(json.dumps(_store_json([1.0, 3.0, 2.0], [2.0, 1.0, 4.0])))
    _, measured, _, met = _rows(_summary.render(results))["SSD tier put / get vs raw files"]
    # a ratio of medians would say 1.00x and pass the 0.8x goal; the repeats' median is 0.5x
    assert "put 0.500x (0.500x-3.00x, 3 pairs)" in measured and "warm get 1.00x (1.00x-1.00x, 3 pairs)" in measured
    assert "put no" in met and "warm get yes" in met


def _ttft_json(miss: list[float], cold: list[float]) -> dict:
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return {"lengths": {"32768": {}}, "repeats_ms": {"32768": {
        "miss": miss, "ssd_cold_hit": cold, "ssd_warm_hit": cold, "ssd_host_hit": cold}},
        "speedup_ssd_hit_vs_miss": {"32768": med(miss) / med(cold)}, "prefill_flops_ratio": 0.5}


def test_ttft_speedup_is_paired_per_repeat_and_old_records_say_they_are_not():
    from tiered_kv.bench import ttft

    # miss 100, 200, 300 ms beside cold hits 50, 10, 20 ms: per repeat 2x, 20x, 15x -> median 15x
    # (the ratio of medians, 200 / 20, would be 10x)
    t = _ttft_json([100.0, 200.0, 300.0], [50.0, 10.0, 20.0])
    measured, met = ttft._summary(t)
    assert measured.startswith("at 32,768 tokens: cold SSD hit 15.0x (2.00x-20.0x, 3 pairs)") and met == "yes"
    old = {**t, "speedup_ssd_warm_hit_vs_miss": {"32768": 9.0}, "speedup_ssd_host_hit_vs_miss": {"32768": 8.0}}
    del old["repeats_ms"]
    measured, met = ttft._summary(old)
    assert "cold SSD hit 10.0x (ratio of medians)" in measured and "SSD+host 8.00x (ratio of medians)" in measured
    assert met == "yes"


def test_ttft_run_keeps_every_repeat_in_pairs():
    import polars as pl

    from tiered_kv.bench import ttft

    every = pl.DataFrame({"length_tokens": [64, 64, 64, 64], "case": ["miss", "ssd_cold_hit"] * 2,
                          "repeat": [1, 1, 0, 0], "ttft_ms": [30.0, 3.0, 10.0, 5.0]})
    runs = ttft.repeats_ms(every)
    assert runs == {"64": {"miss": [10.0, 30.0], "ssd_cold_hit": [5.0, 3.0]}}
    assert ttft.paired_speedup(runs["64"], "ssd_cold_hit") == Paired(6.0, 2.0, 10.0, 2)


def test_cli_row_names_warm_and_cold_start_of_the_slower_command():
    from tiered_kv.bench import sim

    d = {"cli_warm_s": 0.3, "cli_cold_s": 2.45, "meets_targets": {"cli_warm_s": True, "cli_cold_s": False}}
    assert sim._summary_cli(d) == ("warm 300 ms, cold 2.45 s (numba compiles every kernel); slower command, medians",
                                   "warm yes; cold no")


# --- rows without a result, commands ------------------------------------------------------------
def test_a_missing_json_is_said_not_invented(root: Path):
    results = root / "benchmarks" / "results"
    (results / "widgets.json").unlink()
    (results / "kernels_gpu.json").unlink(missing_ok=True)
    rows = _rows(_summary.render(results))
    assert rows["dashboard slider redraw, real trace"][1] == "no result (widgets.json missing)"
    assert rows["FP4 kernels, H200"] == ["`bash benchmarks/gpu_check.sh`", "pending (no result)",
                                         ">= 3.5 TB/s (issue 2)", "pending"]


def test_a_changed_value_shows_in_its_row_and_flips_met(root: Path):
    results = root / "benchmarks" / "results"
    w = json.loads((results / "widgets.json").read_text())
    w["move"].update(p50_ms=12.0, p95_ms=34.0)
    w["meets_target_p95"] = True
    (results / "widgets.json").write_text(json.dumps(w))
    row = _rows(_summary.render(results))["dashboard slider redraw, real trace"]
    assert row[1].startswith("p50 12 ms, p95 34 ms") and row[3] == "yes"
    w["meets_target_p95"] = False
    (results / "widgets.json").write_text(json.dumps(w))
    assert _rows(_summary.render(results))["dashboard slider redraw, real trace"][3] == "no"


# --- the command --------------------------------------------------------------------------------
def test_record_writes_the_json_the_page_and_benchmarks(root: Path, tmp_path: Path, capsys):
    results = root / "benchmarks" / "results"
    run = json.loads((RESULTS / "widgets.json").read_text())
    del run["recorded"]
    run["move"]["p95_ms"] = 77.0
    src = tmp_path / "w.json"
    src.write_text(json.dumps(run))
    assert main(["bench", "record", "widgets", str(src), "--machine", "a test machine", "--root", str(root)]) == 0
    stored = json.loads((results / "widgets.json").read_text())
    assert stored["recorded"] == {"command": "tiered-kv bench widgets --json", "machine": "a test machine"}
    page = (results / "widgets.md").read_text()
    assert "Machine: a test machine" in page and "(p95 77.0 ms)" in page
    assert "## Retention dashboard slider redraw" in (root / "BENCHMARKS.md").read_text()
    assert "p95 77 ms" in (root / "benchmarks" / "SUMMARY.md").read_text()
    assert main(["bench", "record", "widgets", "--command", "tiered-kv bench widgets --json --moves 8",
                 "--root", str(root)]) == 0
    assert "`tiered-kv bench widgets --json --moves 8`" in (root / "benchmarks" / "SUMMARY.md").read_text()
    assert json.loads((results / "widgets.json").read_text())["recorded"]["machine"] == "a test machine"


def test_a_new_run_without_a_machine_note_claims_no_load(root: Path, tmp_path: Path):
    """A new JSON recorded without ``--machine`` says no note was given (it claims nothing about
    a machine nobody described), unless its page has a note of its own."""
    results = root / "benchmarks" / "results"
    run = json.loads((RESULTS / "widgets.json").read_text())
    del run["recorded"]
    src = tmp_path / "w.json"
    src.write_text(json.dumps(run))
    assert main(["bench", "record", "widgets", str(src), "--root", str(root)]) == 0
    page = (results / "widgets.md").read_text()
    assert f"Machine: {NO_MACHINE_NOTE}" in page
    # a page with a note of its own (cluster: nothing on it is timed) keeps it
    run = json.loads((RESULTS / "cluster.json").read_text())
    run.pop("recorded", None)
    src.write_text(json.dumps(run))
    assert main(["bench", "record", "cluster", str(src), "--root", str(root)]) == 0
    assert f"Machine: {cluster_model.MACHINE}" in (results / "cluster.md").read_text()
    # an empty note (--machine "") is none: the page says so instead of an empty "Machine:"
    for name in ("widgets", "ttft"):
        assert main(["bench", "record", name, "--machine", "", "--root", str(root)]) == 0
        assert f"Machine: {NO_MACHINE_NOTE}" in (results / f"{name}.md").read_text()


def test_a_note_typed_with_its_own_label_is_shown_once(root: Path, tmp_path: Path):
    """``--machine "Machine: ..."`` (as some committed runs were recorded) reads ``Machine: ...``."""
    assert main(["bench", "record", "widgets", "--machine", "Machine: quiet, 2 cores", "--root", str(root)]) == 0
    lines = (root / "benchmarks" / "results" / "widgets.md").read_text().splitlines()
    assert "Machine: quiet, 2 cores" in lines and not any("Machine: Machine" in ln for ln in lines)
    recorded = json.loads((root / "benchmarks" / "results" / "widgets.json").read_text())["recorded"]
    assert recorded["machine"] == "quiet, 2 cores"  # stored without the label the page adds
    assert not any("Machine: Machine" in ln for ln in (root / "BENCHMARKS.md").read_text().splitlines())


def test_a_feeding_json_rerenders_the_page_it_feeds(root: Path):
    results = root / "benchmarks" / "results"
    (results / "policies.md").write_text("stale")
    assert main(["bench", "record", "policies_peers", "--root", str(root)]) == 0
    assert (results / "policies.md").read_text() == (RESULTS / "policies.md").read_text()


@pytest.mark.parametrize("argv, match", [
    (["nosuch"], "NAME"),
    (["widgets", "{missing}"], "cannot read the benchmark JSON"),
    (["widgets", "{bad}"], "not the JSON this page is rendered from"),
    (["all", "--machine", "x"], "NAME all"),
])
def test_bad_input_is_one_line_and_writes_nothing(argv, match, root: Path, tmp_path: Path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"trace": "x"}))
    argv = [a.format(missing=tmp_path / "none.json", bad=bad) for a in argv]
    before = (root / "benchmarks" / "results" / "widgets.json").read_text()
    assert main(["bench", "record", *argv, "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert match in err and err.startswith("tiered-kv bench")
    assert (root / "benchmarks" / "results" / "widgets.json").read_text() == before


# --- benchmarks and figures -----------------------------------------------------------------------
def _imports(path: Path) -> set[str]:
    """Every module a file imports, lazily or not, by statement or by importlib with a literal."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.update([node.module, *(f"{node.module}.{a.name}" for a in node.names)])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("tiered_kv."):
            found.add(node.value)  # importlib.import_module("tiered_kv...") and lists of such names
    return found


def test_benchmarks_and_figures_do_not_import_each_other():
    arrows = set()
    for here, there in (("bench", "viz"), ("viz", "bench")):
        for path in sorted((ROOT / "tiered_kv" / here).rglob("*.py")):
            name = "tiered_kv." + ".".join(path.relative_to(ROOT / "tiered_kv").with_suffix("").parts)
            arrows |= {(name, m) for m in _imports(path) if m.startswith(f"tiered_kv.{there}.")
                       or m == f"tiered_kv.{there}"}
    assert arrows == set(), "benchmarks and figures import each other"


def test_the_widgets_benchmark_is_a_command_beside_its_dashboard(capsys):
    from tiered_kv.viz import retention_timing

    assert retention_timing.NAME == "widgets" and "widgets" in record.pages()
    with pytest.raises(SystemExit):
        main(["bench", "widgets", "--help"])
    assert "slider move of the retention dashboard" in capsys.readouterr().out


def test_cli_page_shows_warm_and_cold_runs_of_both_commands():
    from tiered_kv.bench import sim

    r = json.loads((RESULTS / "sim_cli.json").read_text())
    page = sim.render_cli(r)
    assert "| command | warm | cold |\n|---|---:|---:|\n| `tiered-kv curves" in page
    assert "every kernel the command needs is compiled by" in page
    warm = r["cli"]["curves"]["warm_runs_s"]
    assert f"{r['cli']['curves']['warm_s']:.2f} s ({', '.join(f'{x:.2f}' for x in warm)})" in page
