"""benchmarks/results/cluster.md is rendered from cluster.json by the cluster benchmark's page
(``tiered-kv bench record cluster``), never by hand.

The committed page must be what the page renders from the committed JSON; the JSON's cheap
sections (latency model, admission p99) must be what the code gives now; and the whole
computation, re-run at a small size through ``tiered-kv bench cluster --json``, must put on the
page the numbers a fresh call of the package gives (computed here without the module's own
functions).
"""

import json
import math
import re
from pathlib import Path

import pytest

from tiered_kv.bench import cluster_model as rec

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
(PAGE,) = rec.PAGES


def _same(a, b, path="") -> None:
    """Equal JSON trees, floats to 1e-12 relative."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (path, sorted(a), sorted(b))
        for k in a:
            _same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15), (path, a, b)
    else:
        assert a == b, (path, a, b)


def _tables_are_well_formed(page: str) -> None:
    lines = page.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|---") or line.startswith("|---:"):
            cols = lines[i - 1].count("|")
            j = i + 1
            while j < len(lines) and lines[j].startswith("|"):
                assert lines[j].count("|") == cols, (lines[i - 1], lines[j])
                j += 1


def test_committed_page_is_rendered_from_the_committed_json():
    record = json.loads((RESULTS / "cluster.json").read_text())
    assert PAGE.name == "cluster" and record["size"] == "record"
    assert (RESULTS / "cluster.md").read_text() == PAGE.render(record)


def test_committed_latency_and_admission_figures_are_what_the_code_gives_now():
    record = json.loads((RESULTS / "cluster.json").read_text())
    _same(json.loads(json.dumps(rec.latency_section())), record["latency"], "latency")
    fresh = json.loads(json.dumps(rec.admission_section(rec.SIZES["record"]["admission"])))
    _same(fresh, record["admission"], "admission")


@pytest.mark.slow
def test_small_run_puts_freshly_computed_numbers_on_the_page(capsys):
    import contextlib
    import io

    from tiered_kv.cli import main as cli
    from tiered_kv.sim.cluster import ClusterConfig, simulate_cluster
    from tiered_kv.sim.cluster import latency as L
    from tiered_kv.sim.trace_replay import compile_trace
    from tiered_kv.sim.traces import load_trace, shipped_trace
    from tiered_kv.sim.workload.synth import generate
    from tiered_kv.viz.claim_values import day2_disk_fraction

    assert cli(["bench", "cluster", "--json", "--size", "small"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["size"] == "small"
    # the JSON names the command that wrote it, flags and all, and the page shows that command
    assert record["recorded"] == {"command": "tiered-kv bench cluster --json --size small"}
    page = PAGE.render(record)
    assert "tiered-kv bench cluster --json --size small" in page
    headings = [ln for ln in page.splitlines() if ln.startswith("## ")]
    assert [h.split(" (")[0].split(",")[0] for h in headings] == [
        "## Latency model calibration", "## Admission control", "## Routing and pooling on the real trace",
        "## Disk token fraction", "## CLI"]
    _tables_are_well_formed(page)
    assert "Written by `tiered-kv bench record cluster`" in page and "not the record" in page
    assert "Machine: not timed" in page

    # latency rows, from the latency model directly
    cfg = L.preset()
    n = 128 * 1024
    assert f"| 128K miss | {float(L.miss_ttft(cfg, n)):.2f} s |" in page
    assert f"| 128K hit (last 512 tokens new, window replayed) | {float(L.hit_ttft(cfg, n)):.3f} s = " in page
    assert f"| miss / hit at 128K | {float(L.miss_ttft(cfg, n) / L.hit_ttft(cfg, n)):.1f}x |" in page

    # admission: a fresh table at the small setting, every load's row
    (_, duration, rates), = rec.SIZES["small"]["admission"]
    rows = L.admission_table(cfg, [L.MixConfig(rate_per_machine_s=r, duration_s=duration, seed=0) for r in rates])

    def p99(r, adm, cls):
        return next(x["ttft_p99_s"] for x in rows if x["rate_per_machine_s"] == r and x["admission"] == adm
                    and x["class"] == cls)

    for r in rates:
        assert (f"| {r:g} | {p99(r, False, 'all'):.1f} s | {p99(r, True, 'all'):.1f} s | "
                f"{p99(r, False, 'miss'):.1f} s | {p99(r, True, 'miss'):.1f} s |") in page
    top = max(rates)
    assert f"{p99(top, False, 'all'):.1f} s always loading vs {p99(top, True, 'all'):.1f} s with admission" in page

    # routing: the shared pool and the cache-aware split caches, simulated here
    trace = compile_trace(load_trace(shipped_trace("conversation")))
    total = rec.SIZES["small"]["routing_total_tokens"]
    shared = simulate_cluster(trace, ClusterConfig(nodes=10, routing="round-robin", ssd_capacity_tokens=total))
    split = simulate_cluster(trace, ClusterConfig(nodes=10, routing="cache-aware", ssd="per-machine",
                                                  ssd_capacity_tokens=total // 10))
    assert f"shared pool {shared.summary()['token_hit_rate']:.1%} token hit rate under every routing" in page
    assert f"{split.summary()['token_hit_rate']:.1%} (cache-aware, load bound 1.25x mean)" in page

    # disk fraction: figure 05's claim provenance
    assert f"{day2_disk_fraction(True):.1%} of input tokens served from SSD" in page

    # the CLI run, through the command line's own JSON
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli(["simulate", "--synth", "ci", "--days", "1", *rec.CLI_OPTIONS]) == 0
    out = json.loads(buf.getvalue())
    assert f"token hit rate {out['token_hit_rate']:.1%}" in page
    assert f"TTFT p50 {out['ttft_p50_s']:.3f} s, p90 {out['ttft_p90_s']:.3f} s, p99 {out['ttft_p99_s']:.3f} s" in page
    workload = compile_trace(generate("ci", 1.0, 0))  # the run's workload, built here
    assert re.search(rf"The workload: {workload.n_requests:,} requests", page)
