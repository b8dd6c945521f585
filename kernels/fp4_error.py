"""Error statistics of the FP4 formats: what quantization costs on Gaussian and heavy-tailed data.

Why a module of its own: :mod:`tiered_kv.kernels.fp4` is the formats and their kernels; this is
a measurement over them (relative RMSE overall and over the bulk, share zeroed, bits per element),
the numbers REPORT's FP4 claims and notebook 02 show. It only calls the public quantize/dequantize.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from tiered_kv.kernels.fp4 import BLOCK, FP4Tensor, dequantize, quantize

#: The bulk of a sample in :func:`error_stats`: the elements up to this quantile of magnitude.
BULK_QUANTILE = 0.9


def error_stats(seed: int = 0, n: int = 1 << 18, *, heads: int = 8, head_dim: int = 128,
                dof: float = 3.0) -> list[dict]:
    """Round-trip error of each format and MXFP4 scale rule, for figures, reports and notebook 02.

    Samples ``n`` elements shaped ``[n / (heads * head_dim), heads, head_dim]`` (a KV chunk)
    from N(0, 1) and from a heavy-tailed Student-t with ``dof`` degrees of freedom (any real
    ``dof > 0``: a normal over the root of a Gamma(dof/2, 2/dof) draw; outlier channels are what
    hurt block formats), with an explicit seed. Per format and sample:

    * ``rel_rmse_*``: RMSE over the whole sample divided by its RMS. With heavy tails (infinite
      variance at ``dof <= 2``) both are dominated by the few largest values, which sit at the
      top of their block's scale and are stored almost exactly, so this number *falls* as the
      tails get heavier: it says nothing about the other elements.
    * ``bulk_rel_rmse_*``: the same ratio over the bulk of the sample, the 90% of elements
      smallest in magnitude: the error of the typical element. An outlier stretches its block's
      scale and flushes its neighbours towards zero; 32-element MXFP4 blocks with power-of-two
      scales lose more neighbours than 16-element NVFP4 blocks with E4M3 scales, so this error
      rises as the tails get heavier, for MXFP4 first and most.
    * ``zeroed_*``: the share of nonzero inputs decoded as zero.

    ``bits_per_element`` is the storage actually used, NVFP4's per-head global scales included.
    """
    per = heads * head_dim
    if n < per or n % per:
        raise ValueError(f"n must be a positive multiple of heads*head_dim={per}; got {n}")
    if not dof > 0 or not math.isfinite(dof):
        raise ValueError(f"dof must be a finite number > 0; got {dof}")
    g = torch.Generator().manual_seed(seed)
    shape = (n // per, heads, head_dim)
    gauss = torch.randn(shape, generator=g)
    heavy = student_t(shape, dof, seed)

    def stats(x: torch.Tensor, q: FP4Tensor) -> tuple[float, float, float]:
        # reductions in float64: a float32 mean depends on the summation order, which depends on
        # torch's thread count, and these figures are re-executed and compared to 1e-9 (REPORT)
        y = dequantize(q).double()
        x = x.double()
        err = y - x
        whole = float(err.pow(2).mean().sqrt() / x.pow(2).mean().sqrt())
        bulk = x.abs() <= x.abs().flatten().quantile(BULK_QUANTILE)
        typical = float(err[bulk].pow(2).mean().sqrt() / x[bulk].pow(2).mean().sqrt())
        zeroed = float(((y == 0) & (x != 0)).float().mean())
        return whole, typical, zeroed

    rows = []
    for fmt, rule in (("mxfp4", "floor"), ("mxfp4", "ceil"), ("nvfp4", "floor")):
        qg = quantize(gauss, fmt, scale_rule=rule)
        qh = quantize(heavy, fmt, scale_rule=rule)
        (g_all, g_bulk, g_zero), (h_all, h_bulk, h_zero) = stats(gauss, qg), stats(heavy, qh)
        rows.append({"format": fmt, "scale_rule": rule if fmt == "mxfp4" else "-",
                     "block": BLOCK[fmt], "rel_rmse_gaussian": g_all, "rel_rmse_heavy_tailed": h_all,
                     "bulk_rel_rmse_gaussian": g_bulk, "bulk_rel_rmse_heavy_tailed": h_bulk,
                     "zeroed_gaussian": g_zero, "zeroed_heavy_tailed": h_zero,
                     "bits_per_element": qg.bits_per_element, "n": n, "seed": seed, "dof": float(dof)})
    return rows


def student_t(shape: tuple[int, ...], dof: float, seed: int) -> torch.Tensor:
    """Student-t samples with real ``dof`` (float32), from an explicit seed.

    ``Z / sqrt(V / dof)`` with ``V ~ chi2(dof) = Gamma(dof / 2, scale 2)``: numpy's generator,
    because torch's gamma sampler takes no generator.
    """
    rng = np.random.default_rng([seed, 7])
    z = rng.standard_normal(shape)
    v = rng.gamma(dof / 2.0, 2.0, size=shape)
    return torch.from_numpy((z / np.sqrt(v / dof)).astype(np.float32))
