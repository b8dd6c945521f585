"""`tiered-kv bench kernels` runs on a tiny input and its figures are consistent: GB/s is
bytes per element times elements per second, ratios are against the clone in the same run."""

from __future__ import annotations

import argparse
import math

import pytest

from tiered_kv.bench import kernels as bench
from tiered_kv.keys import FORMATS, bytes_per_element


@pytest.fixture(scope="module")
def result() -> dict:
    parser = argparse.ArgumentParser()
    bench.register(parser)
    args = parser.parse_args(["--device", "cpu", "--size", "64KiB", "--repeat", "2",
                              "--attn-tokens", "16", "--window", "8"])
    args.json = True
    return bench.run(args)


def test_bench_reports_every_path_with_consistent_units(result):
    assert result["device"] == "cpu" and result["elements"] == 64 * 1024 // 4
    assert result["clone"]["bytes_per_element"] == 8.0
    for fmt in FORMATS:
        for op in ("quantize", "dequantize"):
            paths = result["fp4"][fmt][op]
            assert "torch" in paths
            for entry in paths.values():
                assert entry["bytes_per_element"] == pytest.approx(4 + bytes_per_element(fmt))
                assert entry["gbps"] == pytest.approx(
                    entry["bytes_per_element"] * entry["elements_per_s"] / 1e9)
                assert entry["ratio_vs_clone"] == pytest.approx(entry["gbps"] / entry["clone_gbps"])
                assert entry["seconds"] > 0 and math.isfinite(entry["gbps"])
    attn = result["attention"]
    assert attn["visible_pairs_per_head"] == 16 * 8  # each of 16 queries sees a full window
    Tq, Tk, Hq, Hkv = 16, 16 + 8, attn["shape"]["Hq"], attn["shape"]["Hkv"]
    assert attn["shape"]["Tk"] == Tk
    # q and o once each, k and v once: (2 Tq Hq + 2 Tk Hkv) D * 4 bytes over Tq Hq D outputs.
    assert attn["torch"]["bytes_per_element"] == pytest.approx((2 * Tq * Hq + 2 * Tk * Hkv) * 4
                                                               / (Tq * Hq))
    assert attn["torch"]["tflops"] > 0


def test_bench_rejects_bad_options():
    parser = argparse.ArgumentParser()
    bench.register(parser)
    for argv in (["--repeat", "0"], ["--window", "0"], ["--threads", "0"], ["--size", "lots"]):
        args = parser.parse_args(["--device", "cpu", *argv])
        args.json = True
        with pytest.raises(ValueError):
            bench.run(args)
