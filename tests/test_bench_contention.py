"""`tiered-kv bench contention` (issue 16 §2): the admission rule, per-class percentiles, the
bandwidth limit measured, and the JSON, at tiny sizes (the tiny preset, random weights)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tiered_kv.cli import main
from tiered_kv.sim.cluster import contention as C
from tiered_kv.sim.cluster import latency as L
from tiered_kv.tiers.ssd.bandwidth import TokenBucket

TINY = ["--model-preset", "tiny", "--streams", "2", "--requests", "8", "--median-tokens", "96", "--block-size", "32",
        "--suffix", "8", "--calibration", "2", "--calibration-repeats", "1", "--no-progress"]


def test_admission_decision_against_a_hand_computed_case():
    # Idle machine: loading ends at queued read + restore compute, recomputing at the recompute time.
    assert C.recompute_is_sooner(queued_read_s=2.5, restore_compute_s=0.2, recompute_s=1.0)  # 2.7 > 1.0
    assert not C.recompute_is_sooner(queued_read_s=0.6, restore_compute_s=0.2, recompute_s=1.0)  # 0.8 < 1.0
    assert not C.recompute_is_sooner(queued_read_s=0.75, restore_compute_s=0.25, recompute_s=1.0)  # a tie loads
    # Busy machine (3 s to go): the read overlaps the wait, so loading (3.2) still beats recomputing (4.0).
    assert not C.recompute_is_sooner(queued_read_s=2.5, restore_compute_s=0.2, recompute_s=1.0, compute_wait_s=3.0)
    # The queued read time read off a token bucket: 2,000 bytes of debt ahead at 1,000 B/s, then 500 of ours.
    bucket = TokenBucket(1000.0, burst=10.0)
    bucket.reserve(2000)
    queued = bucket.predict(500)
    assert queued == pytest.approx((2000 - 10 + 500) / 1000, abs=0.01)
    assert C.recompute_is_sooner(queued_read_s=queued, restore_compute_s=0.2, recompute_s=1.0)


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
    assert not C.recompute_is_sooner(queued_read_s=2.0, restore_compute_s=64 / 1024, recompute_s=2112 / 1024)
    assert C.recompute_is_sooner(queued_read_s=1.5 + 1.0, restore_compute_s=64 / 1024, recompute_s=1088 / 1024)
    x = C.compute_regressors([2112, 1088], [2048, 0], 0) @ np.array([0.0, 1 / 1024, 0.0])
    assert x.tolist() == [64 / 1024, 1088 / 1024]
    # a fixed time per prefill is paid by loads and recomputes alike (so the decisions stand)
    fixed = L.simulate_queue(cfg.with_(prefill_fixed_s=0.25), [0.0, 0.5], [0, 1], [2112, 1088], [2048, 1024],
                             admission=True)
    assert fixed.recomputed.tolist() == [False, True] and fixed.ttft_s.tolist() == [2.3125, 1.3125]


def test_per_class_percentiles():
    ttft = [1.0, 2.0, 3.0, 4.0, 10.0]
    restore = [True, True, False, False, False]
    p = C.class_percentiles(ttft, restore, recomputed=[True, False, False, False, False])
    assert p["restore"]["count"] == 2 and p["miss"]["count"] == 3 and p["all"]["count"] == 5
    assert p["restore"]["p50_ms"] == pytest.approx(1500.0)
    assert p["restore"]["p99_ms"] == pytest.approx(1000.0 + 0.99 * 1000.0)
    assert p["miss"]["p50_ms"] == pytest.approx(4000.0)
    assert p["miss"]["p99_ms"] == pytest.approx(4000.0 + 0.98 * 6000.0)
    assert p["all"]["p50_ms"] == pytest.approx(3000.0) and p["all"]["max_ms"] == 10_000.0
    assert p["restore"]["recomputed_fraction"] == 0.5 and p["miss"]["recomputed_fraction"] == 0.0
    lo, hi = p["miss"]["p50_ms_ci90"]
    assert 3000.0 <= lo <= p["miss"]["p50_ms"] <= hi <= 10_000.0


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
    from tiered_kv.bench.contention import run_order

    order = run_order([1.0, 2.0, 3.0], [0.3, 0.6], (False, True), seed=0)
    assert sorted(order) == sorted((b, ld, a) for b in (1.0, 2.0, 3.0) for ld in (0.3, 0.6) for a in (False, True))
    assert all(order[i][:2] == order[i + 1][:2] for i in range(0, len(order), 2))
    assert [o[2] for o in order[:4]] == [False, True, True, False]
    assert order == run_order([1.0, 2.0, 3.0], [0.3, 0.6], (False, True), seed=0)


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

    from tiered_kv.bench import contention as B
    from tiered_kv.engine import namespace_for
    from tiered_kv.model import EncoderDecoder, preset

    torch.manual_seed(0)
    model = EncoderDecoder(preset("tiny")).eval()
    sc = C.ContentionScenario(streams=4, requests=8, restore_fraction=1.0, median_tokens=256, sigma=0.0,
                              max_tokens=512, block_size=32, suffix_tokens=8)
    work = C.workload(sc)
    tokens = [B.request_tokens(i, n, sc.seed) for i, n in enumerate(work["n"])]
    ns = namespace_for(model, block_size=sc.block_size)
    seed = str(tmp_path / "seed")
    chunk = B._seed_store(model, seed, ns, work, tokens, progress=False)
    total = int(work["blocks"].sum()) * chunk  # (a mean chunk size: headers differ by a few bytes)
    zeros = np.zeros(sc.requests)
    out = {}
    for name, bw in (("limited", total / 1.0), ("unlimited", math.inf)):
        out[name] = B.run_point(model, ns, seed, str(tmp_path / name), work, tokens, np.zeros(sc.requests),
                                bandwidth=bw, link="shared", admission=False, restore_s=zeros, recompute_s=zeros + 1,
                                raw_read_bytes_per_s=1e12, chunk_bytes=chunk)
        assert out[name]["link_bytes"] == pytest.approx(total, rel=1e-3) and out[name]["written_bytes"] == 0
    limited = out["limited"]
    burst = total * 0.05  # BURST_SECONDS of traffic may pass early
    assert limited["link_window_s"] >= 0.85 * (total - burst) / total  # at least ~0.95 s for 1 s of traffic
    assert limited["link_throughput_bytes_per_s"] <= 1.3 * total
    assert out["unlimited"]["link_throughput_bytes_per_s"] > 2 * limited["link_throughput_bytes_per_s"]
    assert np.all(np.isfinite(limited["ttft_s"])) and np.all(limited["ttft_s"] > 0)


def test_json_has_every_key(capsys):
    assert main(["bench", "contention", "--json", *TINY, "--loads", "1", "--bandwidths", "inf", "64KiB/s",
                 "--admission", "both"]) == 0
    r = json.loads(capsys.readouterr().out)
    for key in ("benchmark", "model", "preset", "kv_bytes_per_token", "chunk_bytes", "link", "scenario", "lengths",
                "calibration", "break_even_bandwidth_bytes_per_s", "compute_capacity", "cpus",
                "load_average_start", "load_average_end", "points", "summary", "wall_s"):
        assert key in r, key
    assert r["preset"] == "tiny" and r["scenario"]["streams"] == 2 and len(r["lengths"]["prompt_tokens"]) == 8
    assert {"fixed_s", "a_s_per_token", "b_s_per_token2", "raw_read_bytes_per_s",
            "median_abs_rel_error"} <= set(r["calibration"])
    assert len(r["points"]) == 4  # 2 bandwidths x 1 load x with/without admission
    for p in r["points"]:
        for key in ("bandwidth_bytes_per_s", "bandwidth", "load", "rate_per_s", "admission", "measured", "model",
                    "model_slowed", "decisions_agree", "link_bytes", "link_throughput_bytes_per_s",
                    "compute_slowdown", "offered_link_utilisation", "wall_s"):
            assert key in p, key
        for src in ("measured", "model"):
            assert set(p[src]) == {"restore", "miss", "all"}
            assert p[src]["all"]["count"] == 8
            for q in ("p50_ms", "p99_ms", "p50_ms_ci90", "p99_ms_ci90", "recomputed_fraction"):
                assert q in p[src]["all"], q
            assert p[src]["all"]["p50_ms"] <= p[src]["all"]["p99_ms"]
    # sorted by bandwidth, 'inf' (no limit) last; run_order says when each ran
    assert [p["bandwidth_bytes_per_s"] for p in r["points"]] == [65536.0, 65536.0, None, None]
    assert sorted(p["run_order"] for p in r["points"]) == [0, 1, 2, 3]
    assert {"model_over_measured", "model_slowed_over_measured", "admission_p99_ratio"} <= set(r["summary"])
    assert not [p for p in r["points"] if not p["admission"] and p["measured"]["restore"]["recomputed_fraction"]]


def _fake_result() -> dict:
    def cls(p50, p99, rec=0.0):
        return {"count": 4, "p50_ms": p50, "p99_ms": p99, "recomputed_fraction": rec}

    points = []
    for bw in (None, 32 * 1024.0, 128 * 1024.0):
        for adm in (False, True):
            slow = 1.0 if bw is None else 1024 * 1024 / bw
            points.append({"bandwidth_bytes_per_s": bw, "bandwidth": "x", "load": 0.5, "rate_per_s": 3.0,
                           "admission": adm, "compute_slowdown": 1.5,
                           "measured": {"restore": cls(100 * slow, 300 * slow / (2 if adm else 1), 0.5 * adm),
                                        "miss": cls(200, 400)},
                           "model": {"restore": cls(80 * slow, 250 * slow), "miss": cls(150, 300)},
                           "model_slowed": {"restore": cls(120 * slow, 375 * slow), "miss": cls(225, 450)}})
    return {"points": points, "scenario": C.ContentionScenario().to_dict(), "model": "fake", "params": 1,
            "replay_tokens": 8, "lengths": {"restores": 2, "median": 500.0, "max": 900}, "block_size_tokens": 64,
            "chunk_bytes": 2500.0, "kv_bytes_per_token": 39.0, "link": "shared", "cpus": 2,
            "load_average_start": [1.0, 1.0, 1.0], "break_even_bandwidth_bytes_per_s": 30000.0,
            "calibration": {"fixed_s": 0.01, "a_s_per_token": 1e-4, "b_s_per_token2": 1e-8,
                            "median_abs_rel_error": 0.1},
            "summary": {"model_over_measured": {"restore": {"p99": {"median": 0.8, "min": 0.7, "max": 0.9}}},
                        "admission_p99_ratio": [{"bandwidth": "32 KiB/s", "load": 0.5, "restore_measured": 0.5,
                                                 "restore_model": 1.0}]}}


def test_figure_draws_measured_and_model_with_units(monkeypatch):
    import importlib

    fig = importlib.import_module("tiered_kv.viz.figures.18_contention")
    monkeypatch.setattr(fig, "result", lambda quick: (_fake_result(), "a fake run"))
    built = fig.build(quick=True)
    assert built.data.height == 2 * 2 * 3 * 2  # 2 limited bandwidths x 2 policies x 3 sources x 2 classes
    spec = json.dumps(built.chart.to_dict())
    for title in ("link bandwidth limit (KiB/s, log)", "p99 TTFT (seconds, log)"):
        assert title in spec
    assert set(built.data["source"]) == set(fig.SOURCE_NAMES.values())
    assert sorted(fig.SOURCE_NAMES.values())[0] == fig.SOURCE_NAMES["measured"]  # the solid line
    assert "Admission cut the measured restore p99 at 32 KiB/s" in built.notes and "a fake run" in built.notes
