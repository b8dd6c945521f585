"""scripts/summary_record.py and scripts/bench_record.py: SUMMARY.md and the area pages are
written from the committed JSONs, and every measured figure follows its JSON (change the JSON,
the row changes), so no number in them can be typed by hand."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def _load(name: str):
    sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


summary = _load("summary_record")
bench = _load("bench_record")


def _rows(text: str) -> dict[str, list[str]]:
    """Table rows of SUMMARY.md by area: [command, measured, target, met?]."""
    out = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| area") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            out[cells[0]] = cells[1:]
    return out


def _scale_floats(obj, factor: float):
    """Every float in a JSON tree times ``factor`` (bools and integers left alone)."""
    if isinstance(obj, dict):
        return {k: _scale_floats(v, factor) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_scale_floats(v, factor) for v in obj]
    if isinstance(obj, float):
        return obj * factor
    return obj


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A copy of the committed JSONs that a test may change."""
    dst = tmp_path / "results"
    dst.mkdir()
    for p in RESULTS.glob("*.json"):
        shutil.copy(p, dst / p.name)
    return dst


def test_summary_renders_every_row_from_the_committed_jsons():
    text = summary.render(RESULTS)
    rows = _rows(text)
    assert set(rows) == {r.area for r in summary.ROWS}
    for row in summary.ROWS:
        have = all((RESULTS / f"{s}.json").exists() for s in row.files)
        measured = rows[row.area][1]
        if have:
            assert "no result" not in measured and re.search(r"\d", measured), row.area
        else:
            assert "pending" in measured or "no result" in measured
    assert "Quiet re-run" not in text
    # the prose above the table carries no measured figure: no 'x' ratios, seconds or GB/s
    head = text.split("## Summary")[0]
    assert not re.search(r"\d+(\.\d+)?x\b|\d+(\.\d+)? (ms|s|GB/s)\b", head)


def test_the_committed_summary_is_the_rendered_one():
    """SUMMARY.md on disk is what the script writes from the committed JSONs (re-run it after a record)."""
    assert (ROOT / "benchmarks" / "SUMMARY.md").read_text() == summary.render(RESULTS), \
        "benchmarks/SUMMARY.md is stale: run scripts/summary_record.py and scripts/assemble_benchmarks.sh"


def test_every_measured_figure_follows_its_json(results: Path):
    before = _rows(summary.render(results))
    for p in results.glob("*.json"):
        p.write_text(json.dumps(_scale_floats(json.loads(p.read_text()), 1.37)))
    after = _rows(summary.render(results))
    for row in summary.ROWS:
        if all((RESULTS / f"{s}.json").exists() for s in row.files):
            assert after[row.area][1] != before[row.area][1], f"{row.area}: measured figure not from its JSON"


def test_a_changed_value_shows_in_its_row_and_flips_met(results: Path):
    w = json.loads((results / "widgets.json").read_text())
    w["move"]["p50_ms"] = 12.0
    w["move"]["p95_ms"] = 34.0
    w["meets_target_p95"] = True
    (results / "widgets.json").write_text(json.dumps(w))
    row = _rows(summary.render(results))["dashboard slider redraw, real trace"]
    assert "p50 12 ms, p95 34 ms" in row[1] and row[3] == "yes"
    w["meets_target_p95"] = False
    (results / "widgets.json").write_text(json.dumps(w))
    assert _rows(summary.render(results))["dashboard slider redraw, real trace"][3] == "no"


def test_a_missing_json_is_said_not_invented(results: Path):
    (results / "widgets.json").unlink()
    row = _rows(summary.render(results))["dashboard slider redraw, real trace"]
    assert "no result" in row[1] and "widgets.json" in row[1]


def test_command_comes_from_the_recorded_entry(results: Path):
    w = json.loads((results / "widgets.json").read_text())
    w["recorded"]["command"] = "tiered-kv bench widgets --json --moves 8"
    (results / "widgets.json").write_text(json.dumps(w))
    row = _rows(summary.render(results))["dashboard slider redraw, real trace"]
    assert row[0] == "`tiered-kv bench widgets --json --moves 8`"


@pytest.mark.parametrize("area", sorted(bench.RENDER))
def test_area_pages_follow_their_json(area: str, results: Path):
    src = results / f"{area}.json"
    if not src.exists():
        pytest.skip(f"{area}.json not recorded")
    r = json.loads(src.read_text())
    page = bench.render(area, r)
    assert r["recorded"]["command"] in page
    assert (RESULTS / f"{area}.md").read_text() == page, f"{area}.md is not the page its JSON renders"
    assert bench.render(area, _scale_floats(r, 1.37)) != page


def test_bench_record_rejects_bad_input(tmp_path: Path):
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    with pytest.raises(SystemExit, match="cannot read the benchmark JSON"):
        bench.record("widgets", bad, "cmd", results=tmp_path)
    with pytest.raises(SystemExit, match="unknown area"):
        bench.record("nope", bad, "cmd", results=tmp_path)
