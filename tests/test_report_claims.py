"""REPORT claims: the kind of every row and the provenance that reproduces it (fast checks;
tests/test_reproduce.py re-executes every claim of `tiered-kv reproduce --quick`)."""

import importlib
import json
import math

import pytest

from tiered_kv.viz.report import CLAIM_COLUMNS, KINDS, Claim, claims_table, run_provenance


def _claim(**kw):
    base = dict(claim="c", source="s", published=1.0, reproduced=1.0, unit="x", inputs="i")
    return Claim(**{**base, **kw})


def test_a_claim_without_a_kind_is_refused():
    with pytest.raises(TypeError, match="kind"):
        _claim()
    with pytest.raises(TypeError):  # only by keyword: a positional value cannot slip into it
        Claim("c", "s", 1.0, 1.0, "x", "i", "check")
    with pytest.raises(TypeError):
        _claim(kind="calibration", calibrated=True)  # the old flag is gone: the kind says it
    with pytest.raises(ValueError, match="kind"):
        _claim(kind="guess")
    with pytest.raises(ValueError, match="kind"):
        _claim(kind="")
    record = _claim(kind="proxy").to_dict()
    assert Claim.from_dict(record).kind == "proxy"
    with pytest.raises(ValueError, match="'kind' must be one of"):
        Claim.from_dict({k: v for k, v in record.items() if k != "kind"})


def test_calibrated_is_read_from_the_kind():
    assert _claim(kind="calibration").calibrated
    for kind in ("reproduction", "check", "proxy"):
        assert _claim(kind=kind).kind == kind and not _claim(kind=kind).calibrated
    with pytest.raises(ValueError, match="provenance"):
        _claim(kind="check", provenance=("no_colon", {}))
    table = claims_table([_claim(kind=k) for k in KINDS])
    assert [ln.rstrip(" |").rsplit("| ", 1)[-1] for ln in table.splitlines()[2:]] == list(KINDS)
    assert "published / expected" in table.splitlines()[0]


#: The rows re-examined when the default kind went away: (figure, words of the claim) -> kind.
REEXAMINED = {
    ("05_disk_fraction", "share of input tokens served from disk"): "proxy",
    ("15_deepseek_day", "per-class TTLs agent 3 d / chatbot 7 d"): "proxy",
    ("15_deepseek_day", "DeepSeek-volume day"): "proxy",
    ("02_ttft", "miss/hit TTFT at 128K"): "calibration",
    ("04_prefill_compute", "Bounded replay nearly halves prefill compute"): "check",
    ("01_kv_bytes", "DeepSeek-LLM-67B KV cache in bf16"): "check",
    ("01_kv_bytes", "DeepSeek-V2 KV cache reduction"): "check",
    ("02_ttft", "TTFT of a 128K-token hit, BF16 KV"): "reproduction",
    ("07_capacity_curves", "Cache ratio of the Mooncake synthetic trace"): "reproduction",
}


def test_committed_report_sections_carry_the_reexamined_kinds():
    """figures/sections/ is what REPORT.md is assembled from: each row there has the kind its
    figure now gives (so the sections were rebuilt after the kinds changed)."""
    from tiered_kv import FIGURES_DIR

    seen = set()
    for f in sorted((FIGURES_DIR / "sections").glob("*.json")):
        rec = json.loads(f.read_text())
        for c in rec["claims"]:
            assert c["kind"] in KINDS, (rec["name"], c["claim"])
            assert f"| {c['kind']} |" in rec["section"]
            for (name, words), kind in REEXAMINED.items():
                if name == rec["name"] and words in c["claim"]:
                    assert c["kind"] == kind, (name, c["claim"], c["kind"])
                    seen.add((name, words))
    report = (FIGURES_DIR / "REPORT.md").read_text()
    assert seen == set(REEXAMINED)
    assert report.count("| proxy |") >= 4  # the three disk-share rows and the price gap, in the section tables too


def _build(name: str):
    return importlib.import_module(f"tiered_kv.viz.figures.{name}").build(quick=True)


def test_kv_bytes_rows_reexecute_and_match_the_formula():
    claims = {c.claim: c for c in _build("01_kv_bytes").claims}
    b67 = 2 * 95 * 8 * 128 * 2
    ratio = claims["KV reduction of DeepSeek's 890 B/token cache vs 67B"]
    assert ratio.kind == "check" and "typed in" in ratio.inputs
    assert run_provenance(ratio.provenance) == pytest.approx(b67 / 890.0, rel=1e-12) == ratio.reproduced
    for c in claims.values():
        rec = json.loads(json.dumps(c.to_dict()))
        assert run_provenance(rec["provenance"]) == c.reproduced
    assert claims["DeepSeek-LLM-67B KV cache in bf16 (GQA)"].reproduced == b67


def test_ttft_rows_say_what_the_hit_is_priced_with_and_show_fp4():
    claims = _build("02_ttft").claims
    hits = [c for c in claims if "hit" in c.claim and "miss/hit" not in c.claim]
    assert {("FP4" in c.claim) for c in hits} == {True, False}
    for c in hits:
        assert "fitted to the 13 s miss" in c.inputs
        assert run_provenance(c.provenance) == c.reproduced
    fp4 = next(c for c in hits if "FP4" in c.claim)
    bf16 = next(c for c in hits if "BF16" in c.claim)
    assert fp4.reproduced < bf16.reproduced
    ratio = next(c for c in claims if "miss/hit" in c.claim)
    assert "calibrated 13 s" in ratio.inputs
    assert math.isclose(ratio.reproduced, 13.0 / bf16.reproduced, rel_tol=1e-9)


def test_price_gap_row_is_a_proxy_with_its_length_dependence():
    from tiered_kv.sim.cluster import latency as L

    cfg = L.preset()
    r8 = run_provenance(("tiered_kv.viz.claim_values:machine_time_ratio",
                         {"latency_preset": "deepseek-v3", "tokens": 8192}))
    assert r8 == pytest.approx(float(L.hit_miss_compute_ratio(cfg, 8192)))
    src = importlib.import_module("tiered_kv.viz.figures.06_cost").__file__
    text = open(src).read()
    assert 'kind="proxy"' in text and "at 8K" in text and "at 128K" in text


def test_fp4_rows_are_checks_reexecuted_from_error_stats():
    from tiered_kv.kernels.fp4_error import error_stats

    rows = {(r["format"], r["scale_rule"]): r for r in error_stats(seed=1, n=1 << 13)}
    for fmt, rule in (("mxfp4", "floor"), ("nvfp4", "-")):
        prov = ("tiered_kv.viz.claim_values:fp4_error_stat",
                {"fmt": fmt, "statistic": "rel_rmse_gaussian", "n": 1 << 13, "seed": 1, "scale_rule": "floor"})
        assert run_provenance(prov) == rows[(fmt, rule)]["rel_rmse_gaussian"]
    with pytest.raises(ValueError, match="statistic"):
        run_provenance(("tiered_kv.viz.claim_values:fp4_error_stat", {"fmt": "mxfp4", "statistic": "nope",
                                                                       "n": 1 << 13}))
    with pytest.raises(ValueError, match="fmt"):
        run_provenance(("tiered_kv.viz.claim_values:fp4_error_stat", {"fmt": "int4", "n": 1 << 13}))
    src = importlib.import_module("tiered_kv.viz.figures.09_replay_and_fp4_error").__file__
    text = open(src).read()
    assert 'kind="check"' in text and 'claim_value("fp4_error_stat"' in text


def _markdown_cells(row: str) -> list[str]:
    """A table row's cells as a markdown renderer reads them: a backslash escapes the next
    character, an unescaped ``|`` ends a cell."""
    cells, cur, chars = [], "", iter(row.strip()[1:-1])
    for ch in chars:
        if ch == "\\":
            cur += next(chars)
        elif ch == "|":
            cells, cur = [*cells, cur], ""
        else:
            cur += ch
    return [c.strip() for c in [*cells, cur]]


def test_a_bar_backslash_or_line_break_in_a_claim_stays_in_its_markdown_cell():
    """REPORT.md's table: every row keeps its seven cells in their columns, and each cell reads
    back as the claim's text (line breaks folded to spaces)."""
    c = Claim("hit rate | bytes", "paper\nsection 3\r\nfig 2", published=0.5, reproduced=0.5, unit="fraction",
              inputs="a\\|b", kind="check")
    lines = claims_table([c]).splitlines()
    assert len(lines) == 3
    cells = _markdown_cells(lines[2])
    assert len(cells) == 7 and _markdown_cells(lines[0]) == list(CLAIM_COLUMNS)
    assert (cells[0], cells[1], cells[5], cells[6]) == ("hit rate | bytes", "paper section 3 fig 2", "a\\|b", "check")
