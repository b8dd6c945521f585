"""The public functions behind every REPORT claim's "reproduced" value.

A :class:`tiered_kv.viz.report.Claim` names one of these (``"tiered_kv.viz.claim_values:NAME"``)
and its keyword inputs in ``provenance``; :func:`tiered_kv.viz.report.run_provenance` calls it
again. Each returns one float in the claim's unit. Inputs are JSON values (str, int, float,
bool, lists of them), so ``figures/claims.json`` records them and a test re-executes every one.
"""

from __future__ import annotations

import importlib
from functools import lru_cache


def kv_bytes_per_token(arch: str, bits: float) -> float:
    """KV bytes per token of ``tiered_kv.arch.<arch>`` at ``bits`` per element."""
    import tiered_kv.arch as A

    if arch not in ("DEEPSEEK_67B", "DEEPSEEK_V2"):
        raise ValueError(f"arch: must be 'DEEPSEEK_67B' or 'DEEPSEEK_V2', got {arch!r}")
    return float(getattr(A, arch).bytes_per_token(bits))


def kv_ratio_to_reference(arch: str, bits: float, reference_bytes_per_token: float) -> float:
    """``arch``'s KV bytes per token over a reference size (DeepSeek's published 890 B/token)."""
    return kv_bytes_per_token(arch, bits) / reference_bytes_per_token


def kv_reduction(arch: str, bits: float, vs_arch: str, vs_bits: float) -> float:
    """1 - bytes(arch, bits) / bytes(vs_arch, vs_bits)."""
    return 1.0 - kv_bytes_per_token(arch, bits) / kv_bytes_per_token(vs_arch, vs_bits)


def ttft_seconds(case: str, latency_preset: str, tokens: int) -> float:
    """TTFT of a ``tokens`` prompt from :mod:`tiered_kv.sim.cluster.latency`: 'miss' or 'hit'."""
    from tiered_kv.sim.cluster import latency as L

    ttft = {"miss": L.miss_ttft, "hit": L.hit_ttft}
    if case not in ttft:
        raise ValueError(f"case: must be 'miss' or 'hit', got {case!r}")
    return float(ttft[case](L.preset(latency_preset), tokens))


def miss_over_hit_ttft(latency_preset: str, tokens: int) -> float:
    """Miss TTFT over hit TTFT of the same prompt (the miss is the calibrated 13 s at 128K)."""
    return ttft_seconds("miss", latency_preset, tokens) / ttft_seconds("hit", latency_preset, tokens)


def machine_time_ratio(latency_preset: str, tokens: int) -> float:
    """Miss over hit machine (GPU) seconds, :func:`tiered_kv.sim.cluster.latency.hit_miss_compute_ratio`."""
    from tiered_kv.sim.cluster import latency as L

    return float(L.hit_miss_compute_ratio(L.preset(latency_preset), tokens))


def ttl_loss_points(synth_preset: str, days: float, seed: int, traffic_class: str) -> float:
    """Hit-rate points a class loses when its TTL goes from 7 days to 3 days."""
    from tiered_kv.sim.workload.calibration import ttl_loss

    df = _synth(synth_preset, float(days), int(seed))
    return 100.0 * ttl_loss(df, traffic_class)


@lru_cache(maxsize=4)
def _synth(preset: str, days: float, seed: int):
    from tiered_kv.sim.workload.synth import generate

    return generate(preset, days, seed)


def bounded_replay_flops_ratio(tokens: int) -> float:
    """Prefill FLOPs of the enc-dec with bounded replay over a same-depth decoder-only baseline."""
    from tiered_kv.flops import prefill_flops

    f = prefill_flops(tokens)
    return float(f["encdec_bounded_replay"] / f["baseline_decoder_only"])


def day2_disk_fraction(quick: bool) -> float:
    """Share of day 2's input tokens served from SSD in figure 05's cluster run."""
    from tiered_kv.sim.cluster import summarize
    from tiered_kv.sim.cluster.disk_day import disk_day

    return float(summarize(disk_day(quick)[3])["disk_token_fraction"])


def shipped_cache_ratio(trace: str) -> float:
    """Infinite-cache token hit rate of a shipped Mooncake trace."""
    fig07 = importlib.import_module("tiered_kv.viz.figures.07_capacity_curves")
    return float(fig07.curve_frame(trace, belady_points=2)[1]["infinite"])


def agent_lru_hit_rate(capacity_tokens: float, warmup_days: float | None, hour: int, seed: int) -> float:
    """LRU token hit rate of hour ``hour`` of the synthetic agent class at one capacity."""
    import numpy as np

    from tiered_kv.sim.curves import lru_curve

    trace = class_hour("agent", None if warmup_days is None else float(warmup_days), int(hour), int(seed))
    return float(lru_curve(trace, np.array([capacity_tokens])).token_hit_rate[0])


@lru_cache(maxsize=4)
def class_hour(traffic_class: str, warmup_days: float | None, hour: int, seed: int):
    """Hour ``hour`` (compiled) of a steady-state run of one synthetic class, its warm-up cut to
    ``warmup_days`` (None: the preset's)."""
    from dataclasses import replace

    from tiered_kv.sim.trace_replay import compile_trace
    from tiered_kv.sim.workload import PRESETS, hour_slice

    cfg = PRESETS[traffic_class]
    cfg = cfg if warmup_days is None else replace(cfg, warmup_days=warmup_days)
    return compile_trace(hour_slice(cfg, traffic_class, hour, seed))


def deepseek_day_disk_fraction(quick: bool, policy: str) -> float:
    """Disk-served share of figure 15's steady-state day under ``policy``."""
    fig15 = importlib.import_module("tiered_kv.viz.figures.15_deepseek_day")
    return float(fig15.run(quick)["policies"][policy]["disk_token_fraction"])


def recorded_day_disk_fraction(path: str, policy: str) -> float:
    """Disk-served share recorded by ``tiered-kv day --record`` in a JSON file (a relative path is
    read from the repository root, so the provenance names no machine's folders)."""
    import json

    from tiered_kv import REPO_ROOT

    pol = json.loads((REPO_ROOT / path).read_text())["policies"]
    p = pol.get(policy) or next(iter(pol.values()))
    return float(p["disk_token_fraction"])


def fp4_error_stat(fmt: str, statistic: str = "rel_rmse_gaussian", n: int = 1 << 16, seed: int = 0,
                   scale_rule: str = "floor") -> float:
    """One statistic of :func:`tiered_kv.kernels.fp4_error.error_stats` (its row for ``fmt`` and
    ``scale_rule``; NVFP4 has the one rule ``"-"``), e.g. the relative RMSE on N(0, 1)."""
    from tiered_kv.kernels.fp4_error import error_stats

    rule = "-" if fmt == "nvfp4" else scale_rule
    rows = [r for r in error_stats(seed=int(seed), n=int(n)) if r["format"] == fmt and r["scale_rule"] == rule]
    if not rows:
        raise ValueError(f"fmt/scale_rule: no error_stats row for {fmt!r} with rule {rule!r}")
    if statistic not in rows[0]:
        raise ValueError(f"statistic: must be one of {sorted(rows[0])}, got {statistic!r}")
    return float(rows[0][statistic])
