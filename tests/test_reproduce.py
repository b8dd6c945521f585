"""`tiered-kv reproduce --quick` builds every figure and a report that sets claims beside ours."""

from tiered_kv.cli import main
from tiered_kv.commands.reproduce import figure_modules


def test_reproduce_quick_writes_every_figure_and_the_report(tmp_path):
    assert main(["reproduce", "--quick", "--out", str(tmp_path)]) == 0
    modules = figure_modules()
    assert len(modules) >= 10
    report = (tmp_path / "REPORT.md").read_text()
    for m in modules:
        for ext in ("svg", "png"):
            f = tmp_path / f"{m.NAME}.{ext}"
            assert f.exists() and f.stat().st_size > 1000, f
        assert f"## {m.NAME}:" in report and f"({m.NAME}.png)" in report
    # every claim row carries a published value, ours, and the kind of match
    rows = [ln for ln in report.split("## All claims", 1)[1].split("\n## ", 1)[0].splitlines()
            if ln.startswith("| ") and not ln.startswith("| claim")]
    assert len(rows) >= 8
    assert all(ln.rstrip().endswith(("| reproduction |", "| calibration |")) for ln in rows)
