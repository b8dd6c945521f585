"""`tiered-kv bench contention`: the admission rules, per-class percentiles, the measured queue
state, the bandwidth limit measured, repeats, and the JSON, at tiny sizes (the tiny preset,
random weights); figure 18 from a result whose admission effects go both ways."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tiered_kv.cli import main
from tiered_kv.sim.cluster import contention as C
from tiered_kv.sim.cluster import latency as L
from tiered_kv.sim.cluster.shared_compute import recompute_is_sooner
from tiered_kv.sim.cluster.tail_stats import class_percentiles
from tiered_kv.tiers.ssd.bandwidth import TokenBucket

TINY = ["--model-preset", "tiny", "--streams", "2", "--requests", "8", "--median-tokens", "96", "--block-size", "32",
        "--suffix", "8", "--calibration", "2", "--calibration-repeats", "1", "--no-progress"]


def test_admission_decision_against_a_hand_computed_case():
    # Idle machine: loading ends at queued read + restore compute, recomputing at the recompute time.
    assert recompute_is_sooner(queued_read_s=2.5, restore_compute_s=0.2, recompute_s=1.0)  # 2.7 > 1.0
    assert not recompute_is_sooner(queued_read_s=0.6, restore_compute_s=0.2, recompute_s=1.0)  # 0.8 < 1.0
    assert not recompute_is_sooner(queued_read_s=0.75, restore_compute_s=0.25, recompute_s=1.0)  # a tie loads
    # Busy machine (3 s to go): the read overlaps the wait, so loading (3.2) still beats recomputing (4.0).
    assert not recompute_is_sooner(queued_read_s=2.5, restore_compute_s=0.2, recompute_s=1.0, compute_wait_s=3.0)
    # The queued read time read off a token bucket: 2,000 bytes of debt ahead at 1,000 B/s, then 500 of ours.
    bucket = TokenBucket(1000.0, burst=10.0)
    bucket.reserve(2000)
    queued = bucket.predict(500)
    assert queued == pytest.approx((2000 - 10 + 500) / 1000, abs=0.01)
    assert recompute_is_sooner(queued_read_s=queued, restore_compute_s=0.2, recompute_s=1.0)


def test_admission_rule_is_the_latency_models():
    """Exact binary numbers: 1,024 B/s, 1 B/token, 1/1024 s per token, no replay, no write-back."""
    cfg = L.LatencyConfig(kv_bytes_per_token=1.0, read_bandwidth_bytes_per_s=1024.0,
                          prefill_a_s_per_token=1 / 1024, prefill_b_s_per_token2=0.0, replay_tokens=0,
                          write_back=False)
    # request 0 at t=0 on machine 0: reads 2,048 tokens (2 s), then 64 tokens (1/16 s) = 2.0625 s,
    # the same as recomputing 2,112 tokens: a tie, so it loads.
    # request 1 at t=0.5 on machine 1: its read queues behind request 0's until t=2, then takes 1 s:
    # loading ends at 3.0625, recomputing 1,088 tokens at 0.5 + 1.0625 = 1.5625: recompute.
    r = L.simulate_queue(cfg, [0.0, 0.5], [0, 1], [2112, 1088], [2048, 1024], admission=True)
    assert r.recomputed.tolist() == [False, True]
    assert r.ttft_s.tolist() == [2.0625, 1.0625]
    assert not recompute_is_sooner(queued_read_s=2.0, restore_compute_s=64 / 1024, recompute_s=2112 / 1024)
    assert recompute_is_sooner(queued_read_s=1.5 + 1.0, restore_compute_s=64 / 1024, recompute_s=1088 / 1024)
    x = C.compute_regressors([2112, 1088], [2048, 0], 0) @ np.array([0.0, 1 / 1024, 0.0])
    assert x.tolist() == [64 / 1024, 1088 / 1024]
    # a fixed time per prefill is paid by loads and recomputes alike (so the decisions stand)
    fixed = L.simulate_queue(cfg.with_(prefill_fixed_s=0.25), [0.0, 0.5], [0, 1], [2112, 1088], [2048, 1024],
                             admission=True)
    assert fixed.recomputed.tolist() == [False, True] and fixed.ttft_s.tolist() == [2.3125, 1.3125]


def test_per_class_percentiles():
    ttft = [1.0, 2.0, 3.0, 4.0, 10.0]
    restore = [True, True, False, False, False]
    p = class_percentiles(ttft, restore, recomputed=[True, False, False, False, False])
    assert p["restore"]["count"] == 2 and p["miss"]["count"] == 3 and p["all"]["count"] == 5
    assert p["restore"]["p50_ms"] == pytest.approx(1500.0)
    assert p["restore"]["p99_ms"] == pytest.approx(1000.0 + 0.99 * 1000.0)
    assert p["miss"]["p50_ms"] == pytest.approx(4000.0)
    assert p["miss"]["p99_ms"] == pytest.approx(4000.0 + 0.98 * 6000.0)
    assert p["all"]["p50_ms"] == pytest.approx(3000.0) and p["all"]["max_ms"] == 10_000.0
    assert p["restore"]["recomputed_fraction"] == 0.5 and p["miss"]["recomputed_fraction"] == 0.0
    assert p["miss"]["p50_ms_ci90"] == [None, None]  # three values bound no median at 90%
    many = class_percentiles(np.arange(1, 21) / 1e3, np.ones(20, dtype=bool))
    assert many["restore"]["p50_ms_ci90"] == [6.0, 15.0]  # Bin(20, 0.5): ranks 6 and 15 (95.9% cover)
    assert many["restore"]["p99_ms_ci90"] == [19.0, None]  # 20 values give a p99 no upper end


def test_lengths_are_fixed_by_the_seed_and_loads_only_rescale_arrivals():
    sc = C.ContentionScenario(requests=64, seed=3)
    a, b = C.workload(sc), C.workload(C.ContentionScenario(requests=64, seed=3, streams=16))
    assert a["n"].tolist() == b["n"].tolist() and a["restore"].tolist() == b["restore"].tolist()
    assert not np.array_equal(a["n"], C.workload(C.ContentionScenario(requests=64, seed=4))["n"])
    assert np.all((a["n"] - sc.suffix_tokens) % sc.block_size == 0) and np.all(a["n"] <= sc.max_tokens)
    assert np.array_equal(a["cached"] > 0, a["restore"])
    slow, fast = C.arrivals(a["gaps"], 1.0), C.arrivals(a["gaps"], 4.0)
    assert slow[0] == 0.0 and np.allclose(slow, 4 * fast)


def test_points_run_in_a_shuffled_order_with_admission_pairs_together():
    from tiered_kv.measure.contention.settings import run_order

    pols = ("load", "own", "shared")
    order = run_order([1.0, 2.0, 3.0], [0.3, 0.6], pols, seed=0)
    assert sorted(order) == sorted((b, ld, a) for b in (1.0, 2.0, 3.0) for ld in (0.3, 0.6) for a in pols)
    assert all(order[i][:2] == order[i + 1][:2] == order[i + 2][:2] for i in range(0, len(order), 3))
    assert [o[2] for o in order[:6]] == ["load", "own", "shared", "own", "shared", "load"]  # rotated
    assert order == run_order([1.0, 2.0, 3.0], [0.3, 0.6], pols, seed=0)
    second = run_order([1.0, 2.0, 3.0], [0.3, 0.6], pols, seed=0, round_=1)
    assert sorted(second) == sorted(order) and second != order  # each round its own order


def test_compute_fit_recovers_the_coefficients():
    n = np.array([100, 400, 900, 1600, 300, 700])
    cached = np.array([0, 0, 0, 0, 256, 640])
    t = C.compute_seconds(0.05, 2e-4, 3e-8, n, cached, 16)
    c, a, b = C.fit_compute(n, cached, 16, t)
    assert c == pytest.approx(0.05, rel=1e-6) and a == pytest.approx(2e-4, rel=1e-6)
    assert b == pytest.approx(3e-8, rel=1e-6)
    assert C.fit_compute(n, cached, 16, C.compute_seconds(0.0, 2e-4, 0.0, n, cached, 16)) == \
        pytest.approx((0.0, 2e-4, 0.0), abs=1e-12)  # no negative terms: the best subset


@pytest.mark.parametrize("flags, message", [
    (["--streams", "17"], "--streams: must be an integer in [1, 16], got 17"),
    (["--restore-fraction", "1.5"], "--restore-fraction: must be a number in [0, 1], got 1.5"),
    (["--loads", "0"], "--loads: must be a number in (0, 4], got 0.0"),
    (["--suffix", "32"], "--suffix: must be an integer in [1, 31], got 32"),
    (["--bandwidths", "fast"], "--bandwidths: each must be a rate > 0"),
    (["--bandwidths", "0"], "--bandwidths: each must be a rate > 0"),
    (["--median-tokens", "3000", "--max-tokens", "4000"], "--max-tokens: must be in [40, 2048]"),
    (["--checkpoint", "/nonexistent.pt"], "--checkpoint: /nonexistent.pt: no such file"),
])
def test_bad_settings_name_the_setting_and_its_range(flags, message, capsys):
    assert main(["bench", "contention", *TINY, *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_help_describes_the_benchmark(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "contention", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "restores" in out and "--bandwidths" in out and "admission" in out


def test_bandwidth_limit_limits_measured_throughput(tmp_path):
    """Every request a restore, all arriving at once: the link carries the limit, no more."""
    import torch

    from tiered_kv.engine import namespace_for
    from tiered_kv.measure.contention.engines import run_point, seed_store
    from tiered_kv.measure.contention.settings import request_tokens
    from tiered_kv.model import EncoderDecoder, preset

    torch.manual_seed(0)
    model = EncoderDecoder(preset("tiny")).eval()
    sc = C.ContentionScenario(streams=4, requests=8, restore_fraction=1.0, median_tokens=256, sigma=0.0,
                              max_tokens=512, block_size=32, suffix_tokens=8)
    work = C.workload(sc)
    tokens = [request_tokens(i, n, sc.seed) for i, n in enumerate(work["n"])]
    ns = namespace_for(model, block_size=sc.block_size)
    seed = str(tmp_path / "seed")
    chunk = seed_store(model, seed, ns, work, tokens, progress=False)
    total = int(work["blocks"].sum()) * chunk  # (a mean chunk size: headers differ by a few bytes)
    zeros = np.zeros(sc.requests)
    out = {}
    for name, bw in (("limited", total / 1.0), ("unlimited", math.inf)):
        out[name] = run_point(model, ns, seed, str(tmp_path / name), work, tokens, np.zeros(sc.requests),
                              bandwidth=bw, link="shared", policy="load", cores=2, restore_s=zeros,
                              recompute_s=zeros + 1, raw_read_bytes_per_s=1e12, chunk_bytes=chunk)
        assert out[name]["link_bytes"] == pytest.approx(total, rel=1e-3) and out[name]["written_bytes"] == 0
    limited = out["limited"]
    burst = total * 0.05  # BURST_SECONDS of traffic may pass early
    assert limited["link_window_s"] >= 0.85 * (total - burst) / total  # at least ~0.95 s for 1 s of traffic
    assert limited["link_throughput_bytes_per_s"] <= 1.3 * total
    assert out["unlimited"]["link_throughput_bytes_per_s"] > 2 * limited["link_throughput_bytes_per_s"]
    assert np.all(np.isfinite(limited["ttft_s"])) and np.all(limited["ttft_s"] > 0)


def test_json_has_every_key(capsys):
    assert main(["bench", "contention", "--json", *TINY, "--loads", "1", "--bandwidths", "inf", "64KiB/s",
                 "--admission", "shared", "--repeats", "2"]) == 0
    r = json.loads(capsys.readouterr().out)
    for key in ("benchmark", "model", "preset", "kv_bytes_per_token", "chunk_bytes", "link", "scenario", "lengths",
                "calibration", "break_even_bandwidth_bytes_per_s", "compute_capacity", "cpus", "repeats", "policies",
                "load_average_start", "load_average_end", "points", "summary", "wall_s"):
        assert key in r, key
    assert r["preset"] == "tiny" and r["scenario"]["streams"] == 2 and len(r["lengths"]["prompt_tokens"]) == 8
    assert r["repeats"] == 2 and r["policies"] == ["load", "shared"]
    assert {"fixed_s", "a_s_per_token", "b_s_per_token2", "raw_read_bytes_per_s",
            "median_abs_rel_error"} <= set(r["calibration"])
    assert len(r["points"]) == 4  # 2 bandwidths x 1 load x 2 policies
    for p in r["points"]:
        for key in ("bandwidth_bytes_per_s", "bandwidth", "load", "rate_per_s", "policy", "admission", "measured",
                    "pooled", "model", "model_shared", "repeats", "compute_slowdown", "compute_slowdown_spread",
                    "offered_link_utilisation", "link_throughput_bytes_per_s", "wall_s"):
            assert key in p, key
        assert len(p["repeats"]) == 2 and len(p["run_order"]) == 2
        runs = [rep["measured"]["all"]["p99_ms"] for rep in p["repeats"]]
        assert p["measured"]["all"]["p99_ms_spread"] == [min(runs), max(runs)]
        assert p["measured"]["all"]["p99_ms"] == pytest.approx(float(np.median(runs)))
        assert p["pooled"]["all"]["count"] == 16  # both repeats' requests
        assert p["pooled"]["all"]["p99_ms_ci90"][1] is None  # 16 values give a p99 no upper end
        for src in ("measured", "model", "model_shared"):
            assert set(p[src]) == {"restore", "miss", "all"} and p[src]["all"]["count"] == 8
    # sorted by bandwidth, 'inf' (no limit) last; run_order says when each repeat ran
    assert [p["bandwidth_bytes_per_s"] for p in r["points"]] == [65536.0, 65536.0, None, None]
    assert sorted(k for p in r["points"] for k in p["run_order"]) == list(range(8))
    assert {"model_over_measured", "admission"} <= set(r["summary"])
    assert not [p for p in r["points"] if p["policy"] == "load" and p["measured"]["restore"]["recomputed_fraction"]]
    row = r["summary"]["admission"][0]
    assert row["policy"] == "shared" and len(row["restore"]["measured"]["ratios"]) == 2


def test_dispatcher_reads_the_measured_queue_state():
    from tiered_kv.measure.contention.engines import _Streams

    view = _Streams(3, cores=1.0)
    view.add(0, 0, 1.0)
    view.add(0, 1, 0.5)
    view.add(1, 2, 2.0)
    view.started(0, 0, 10.0)
    # at 10.5 two streams are busy on one core: the running request did 0.5 s / 2 = 0.25 s of its 1 s
    st = view.state(0, 10.5, queued_read_s=0.3)
    assert st.stream_backlog_s == pytest.approx(1.25) and st.busy_streams == 1 and st.queued_read_s == 0.3
    assert view.state(2, 10.5, 0.0).busy_streams == 2 and view.state(2, 10.5, 0.0).stream_backlog_s == 0.0
    view.finished(0, 0)
    assert view.state(0, 11.0, 0.0).stream_backlog_s == pytest.approx(0.5)


def _fake_result() -> dict:
    """Points built from TTFT arrays through the benchmark's own record and summary code: the
    'own' policy doubles restore p99 at 32 KiB/s and halves it at 128 KiB/s."""
    from tiered_kv.measure.contention.report import point_record, summarize

    work = {"restore": np.array([True, True, True, False]), "n": np.array([100, 200, 300, 400])}
    base = np.array([0.1, 0.2, 0.3, 0.4])
    points = []
    for bw, factor in ((32 * 1024.0, 2.0), (128 * 1024.0, 0.5), (math.inf, 1.0)):
        for pol in ("load", "own"):
            scale = [factor * (1 + 0.01 * k) if pol == "own" else 1 + 0.01 * k for k in range(3)]
            rec = work["restore"] if pol == "own" and factor != 1.0 else np.zeros(4, dtype=bool)
            runs = [np.where(work["restore"], base * s, base) for s in scale]
            reps = [{"measured": class_percentiles(t, work["restore"], rec, interval=False), "compute_slowdown": 1.5,
                     "run_order": k, "wall_s": 1.0, "link_throughput_bytes_per_s": 1e5,
                     "dispatch_lateness_max_s": 0.0, "decisions_agree": {"model": 1.0, "model_shared": 1.0}}
                    for k, t in enumerate(runs)]
            model = {"ttft_s": runs[1], "recomputed": rec}
            points.append(point_record(reps, np.concatenate(runs), np.tile(rec, 3),
                                       {"model": model, "model_shared": model}, work, np.zeros(4), bandwidth=bw,
                                       load=0.5, rate=3.0, policy=pol, break_even=30000.0, mean_link=1e4))
    return {"points": points, "summary": summarize(points), "scenario": C.ContentionScenario().to_dict(),
            "model": "fake", "params": 1, "replay_tokens": 8, "repeats": 3, "policies": ["load", "own"],
            "lengths": {"restores": 3, "median": 500.0, "p90": 800.0, "max": 900}, "block_size_tokens": 64, "chunk_bytes": 2500.0,
            "kv_bytes_per_token": 39.0, "link": "shared", "cpus": 2, "compute_capacity": 2,
            "load_average_start": [1.0, 1.0, 1.0], "load_average_end": [1.0, 1.0, 1.0],
            "break_even_bandwidth_bytes_per_s": 30000.0,
            "calibration": {"fixed_s": 0.01, "a_s_per_token": 1e-4, "b_s_per_token2": 1e-8,
                            "median_abs_rel_error": 0.1, "repeats": 1, "requests": [0, 1], "classes": {},
                            "raw_read_bytes_per_s": 1e6},
            "fmt": "mxfp4", "preset": "tiny", "window_tokens": 16, "torch_threads": 1, "wall_s": 1.0}


def test_figure_shows_where_admission_helps_and_where_it_hurts(monkeypatch):
    import importlib

    fig = importlib.import_module("tiered_kv.viz.figures.18_contention")
    res = _fake_result()
    monkeypatch.setattr(fig, "result", lambda quick: (res, "a fake run"))
    built = fig.build(quick=True)
    assert built.data.height == 2 * 2 * 2 * 2  # 2 limited bandwidths x 2 policies x 2 sources x 2 classes
    spec = json.dumps(built.chart.to_dict())
    for title in ("link bandwidth limit (KiB/s, log)", "p99 TTFT (seconds, log)", "p99 with admission / always load"):
        assert title in spec
    effect = fig.effect_frame(res)
    measured = effect.filter(effect["source"] == fig.SOURCE_NAMES["measured"])
    ratios = dict(zip(measured.filter(measured["class"] == fig.CLASS_NAMES["restore"])["bandwidth_kib_s"],
                      measured.filter(measured["class"] == fig.CLASS_NAMES["restore"])["ratio"], strict=True))
    assert ratios == {32.0: pytest.approx(2.0), 128.0: pytest.approx(0.5)}  # 2x and 0.5x, paired by repeat
    # the page's words: each admission point, restores and misses, raised beside cut
    assert "admission, own TTFT, 32 KiB/s, load 0.5 (recomputed 100% measured" in built.notes
    assert "restores raised: x2.00 (2.00-2.00, 3 pairs" in built.notes
    assert "restores cut: x0.50 (0.50-0.50, 3 pairs" in built.notes
    assert "misses unchanged: x1.00" in built.notes
    assert "admission, own TTFT, unlimited, load 0.5 (recomputed 0% measured" in built.notes
    assert "restores nothing recomputed: x1.00" in built.notes
    assert "a fake run" in built.notes


def test_page_lists_increases_beside_cuts():
    from tiered_kv.bench.contention import render_record, summary_cells

    res = _fake_result()
    page = render_record(res)
    assert "restores raised: x2.00 (2.00-2.00, 3 pairs" in page and "restores cut: x0.50 (0.50-0.50, 3 pairs" in page
    assert "| 32 KiB/s (1.1x) | 0.5 (3/s) | admission, own TTFT | restore (3) |" in page
    figure, _ = summary_cells(res)
    assert "admission, own TTFT: restore p99 cut at 1, raised at 1, nothing recomputed at 1" in figure
