"""`tiered-kv reproduce --quick` builds every figure and a report that sets claims beside ours.

Every claim row has a kind (reproduction, calibration, check, proxy) and a provenance (the
public function and its inputs); the provenance of every claim is executed again here and must
give the row's value. Where an independent check exists (a formula), the row is tested
against that too.
"""

import json
import math
import re

import pytest

from tiered_kv.cli import main
from tiered_kv.viz.figures import modules as figure_modules
from tiered_kv.viz.report import KINDS, run_provenance

#: Claims that have no provenance yet, with the reason (none left: every claim has one).
NO_PROVENANCE_YET: dict[str, str] = {}


def _e2m1(v):
    """Nearest E2M1 value of each element (saturating at 6), sign kept; a brute-force grid search."""
    import numpy as np

    grid = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    a = np.minimum(np.abs(v), 6.0)
    return np.sign(v) * grid[np.abs(a[..., None] - grid).argmin(-1)]


def _e4m3(s):
    """Nearest positive E4M3 (fn) value of each scale, by search over all 126 finite values."""
    import numpy as np

    sub = [m / 8 * 2.0 ** -6 for m in range(1, 8)]
    normal = [(1 + m / 8) * 2.0 ** (e - 7) for e in range(1, 16) for m in range(8) if (e, m) != (15, 7)]
    grid = np.array([0.0, *sub, *normal])
    return grid[np.abs(np.minimum(s, 448.0)[..., None] - grid).argmin(-1)]


def _fp4_rel_rmse(fmt: str, n: int, seed: int) -> float:
    """Relative RMSE of MXFP4 (spec floor rule) or NVFP4 (per-head global scale) on error_stats'
    N(0,1) sample, from the formats' definitions in numpy (no kernel code)."""
    import numpy as np
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn((n // (8 * 128), 8, 128), generator=g).numpy().astype(np.float64)
    if fmt == "mxfp4":
        b = x.reshape(-1, 32)
        scale = 2.0 ** (np.floor(np.log2(np.abs(b).max(1))) - 2)
    else:
        gs = np.abs(x).max(axis=(0, 2)) / (448 * 6)  # one FP32 scale per head
        b = x.reshape(-1, 16)
        gsb = np.broadcast_to(gs[None, :, None], (x.shape[0], 8, 128 // 16)).reshape(-1)
        scale = _e4m3(np.abs(b).max(1) / (6 * gsb)) * gsb
    y = _e2m1(b / scale[:, None]) * scale[:, None]
    return float(np.sqrt(((y - b) ** 2).mean() / (b ** 2).mean()))


def _independent(rec: dict) -> float | None:
    """The value a claim should have, computed without the function it names (None: no check)."""
    fn, kw = rec["provenance"]["function"].split(":")[1], rec["provenance"]["inputs"]
    if fn == "kv_bytes_per_token" and kw["arch"] == "DEEPSEEK_67B":
        return 2 * 95 * 8 * 128 * kw["bits"] / 8  # K and V x layers x KV heads x head dim x bytes
    if fn == "kv_ratio_to_reference":
        return 2 * 95 * 8 * 128 * 2 / 890.0
    if fn == "kv_reduction":
        return 1 - 60 * (512 + 64) * kw["bits"] / 8 / (2 * 95 * 8 * 128 * 2)
    if fn == "fp4_error_stat" and kw["statistic"] == "rel_rmse_gaussian" and kw["scale_rule"] == "floor":
        return _fp4_rel_rmse(kw["fmt"], kw["n"], kw["seed"])
    if fn in ("ttft_seconds", "miss_over_hit_ttft", "machine_time_ratio"):
        from tiered_kv.sim.cluster import latency as L

        c, n = L.preset(kw["latency_preset"]), float(kw["tokens"])
        new = L.HIT_SCENARIO_NEW_TOKENS
        a, b = c.prefill_a_s_per_token, c.prefill_b_s_per_token2

        def work(lo, hi):  # whole-prompt cost a*n + b*n^2, a suffix is an increment of it
            return a * (hi - lo) + b * (hi * hi - lo * lo)

        miss = work(0, n)
        replay = work(n - new - c.replay_tokens, n - new)  # R tokens replayed before the new ones
        load = (n - new) * c.kv_bytes_per_token / c.read_bandwidth_bytes_per_s
        if fn == "machine_time_ratio":
            return miss / (work(n - new, n) + replay)
        if kw.get("case") == "miss":
            return miss
        hit = load + work(n - new, n) + replay
        return hit if fn == "ttft_seconds" else miss / hit
    return None


def _clear_caches() -> None:
    """So a provenance runs its computation again instead of reading the figure's result."""
    import tiered_kv.viz.claim_values as cv
    from tiered_kv.sim.cluster.disk_day import disk_day

    cv._synth.cache_clear()
    cv.class_hour.cache_clear()
    disk_day.cache_clear()


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
    assert all(ln.rstrip().endswith(tuple(f"| {k} |" for k in KINDS)) for ln in rows)
    # the relabelled rows
    by_kind = {ln.split(" | ")[0]: ln.rstrip().rsplit("| ", 2)[-1].strip(" |") for ln in rows}
    assert by_kind["| KV reduction of DeepSeek's 890 B/token cache vs 67B"] == "check"
    assert any(k.startswith("| a cache hit costs 50x less") and v == "proxy" for k, v in by_kind.items())
    assert any("FP4 KV" in k for k in by_kind)

    records = json.loads((tmp_path / "claims.json").read_text())
    assert len(records) == len(rows)
    _clear_caches()
    for rec in records:
        assert rec["kind"] in KINDS
        if rec["provenance"] is None:
            assert any(s in rec["claim"] for s in NO_PROVENANCE_YET), rec["claim"]
            continue
        again = run_provenance(rec["provenance"])
        assert math.isclose(again, rec["reproduced"], rel_tol=1e-9, abs_tol=1e-12), (rec["claim"], again)
        expected = _independent(rec)
        if expected is not None:
            # the FP4 reference rounds in float64 where the kernels round in float32
            tol = 1e-6 if rec["provenance"]["function"].endswith(":fp4_error_stat") else 1e-9
            assert math.isclose(rec["reproduced"], expected, rel_tol=tol), (rec["claim"], expected)
    # the relabelled FP4 rows: checks against an expectation, re-executed from kernels.fp4_error.error_stats
    fp4 = [r for r in records if "relative RMSE on N(0,1)" in r["claim"]]
    assert len(fp4) == 2 and all(r["kind"] == "check" for r in fp4)
    assert {r["provenance"]["inputs"]["fmt"] for r in fp4} == {"mxfp4", "nvfp4"}


def test_fp4_reference_agrees_with_the_kernels():
    """The numpy reference of the FP4 rows against error_stats, fast, at a small size."""
    from tiered_kv.viz.claim_values import fp4_error_stat

    for fmt in ("mxfp4", "nvfp4"):
        got = fp4_error_stat(fmt, n=1 << 14, seed=3)
        assert math.isclose(got, _fp4_rel_rmse(fmt, 1 << 14, 3), rel_tol=1e-6), fmt


def test_every_figure_has_its_own_number_and_its_file_name():
    """Two figures numbered 15 (15_deepseek_day, 15_write_points) once; NAME is the module's file stem."""
    from pathlib import Path

    modules = figure_modules()
    numbers = [m.NAME.split("_", 1)[0] for m in modules]
    assert all(n.isdigit() and len(n) == 2 for n in numbers), numbers
    assert len(set(numbers)) == len(numbers), sorted(n for n in numbers if numbers.count(n) > 1)
    for m in modules:
        assert Path(m.__file__).stem == m.NAME, (m.__file__, m.NAME)
    assert "19_write_points" in {m.NAME for m in modules}


def test_only_rebuilds_one_figure_and_keeps_the_other_sections(tmp_path):
    """`--only` replaces one figure's section; the sections built earlier stay in REPORT and claims.json."""
    from tiered_kv.viz.report import Claim

    assert main(["reproduce", "--quick", "--out", str(tmp_path), "--only", "01_kv_bytes"]) == 0
    first = json.loads((tmp_path / "claims.json").read_text())
    assert first and "Not built yet" in (tmp_path / "REPORT.md").read_text()
    assert main(["reproduce", "--quick", "--out", str(tmp_path), "--only", "04_prefill"]) == 0
    report = (tmp_path / "REPORT.md").read_text()
    assert "## 01_kv_bytes:" in report and "## 04_prefill_compute:" in report
    assert report.index("## 01_kv_bytes:") < report.index("## 04_prefill_compute:")
    records = json.loads((tmp_path / "claims.json").read_text())
    assert records[:len(first)] == first and len(records) >= len(first)
    assert [Claim.from_dict(r).to_dict() for r in records] == records  # the saved claims read back exactly
    # a section of another size is named in the header; an unknown --only name is refused
    assert "another size" not in report
    saved = tmp_path / "sections" / "04_prefill_compute.json"
    saved.write_text(saved.read_text().replace('"mode": "quick"', '"mode": "full"'))
    assert main(["reproduce", "--quick", "--out", str(tmp_path), "--only", "01_kv_bytes"]) == 0
    assert "04_prefill_compute (full)" in (tmp_path / "REPORT.md").read_text()
    with pytest.raises(SystemExit, match="no figure name contains"):
        main(["reproduce", "--quick", "--out", str(tmp_path), "--only", "no_such_figure"])


def test_jobs_build_figures_in_processes_with_a_line_each(tmp_path, capsys):
    """`--jobs 2` builds the figures in two processes: the same files and sections as one at a time;
    each figure's bar is sized by its last build at that size, and off a terminal it is one line."""
    from tiered_kv.commands.reproduce import last_build_s

    only = ["--only", "01_kv_bytes", "06_cost"]
    assert main(["reproduce", "--quick", "--out", str(tmp_path / "one"), "--jobs", "1", *only]) == 0
    assert main(["reproduce", "--quick", "--out", str(tmp_path / "two"), "--jobs", "2", *only]) == 0
    out = capsys.readouterr().out
    # one at a time, a figure's time excludes its wait behind the other: the two fit in the whole run
    first_run = out.split("wrote 2 figures")[0]
    times = [float(t) for t in re.findall(r" built in ([0-9.]+) s", first_run)]
    whole = float(re.search(r"wrote 2 figures and .* in ([0-9]+) s", out).group(1))
    assert len(times) == 2 and sum(times) <= whole + 1.0
    for name in ("01_kv_bytes", "06_cost"):
        assert out.count(f"{name} ") == 2 and " built in " in out  # stdout is not a terminal here
        one, two = (json.loads((tmp_path / d / "sections" / f"{name}.json").read_text()) for d in ("one", "two"))
        assert one["claims"] == two["claims"] and one["section"].split("_Built in")[0] == \
            two["section"].split("_Built in")[0]
        assert (tmp_path / "two" / f"{name}.png").stat().st_size > 1000
        assert last_build_s(tmp_path / "two", name, "quick") == two["built_s"] > 0
        assert last_build_s(tmp_path / "two", name, "full") is None  # another size: no estimate
    assert last_build_s(tmp_path / "two", "no_such_figure", "quick") is None
