"""What every part of the SSD-tier suite (and the multi-process workers) shares: the clock, the
namespace, the KV and its FP4 reference, and :class:`SuiteBase`, which declares the
``make_store`` fixture a backend's test class provides and builds the tier under test.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tiered_kv.keys import DEFAULT_FORMAT, Namespace
from tiered_kv.tiers.ssd import SSDConfig, SSDTier

BS = 8


class Clock:
    """A settable clock (seconds) to inject into SSDTier."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def namespace(fmt: str = DEFAULT_FORMAT) -> Namespace:
    return Namespace(model="suite-model", fmt=fmt, block_size=BS, kv_heads=2, head_dim=32)


def make_kv(n: int, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    """KV with magnitudes spread over tokens (what breaks a per-tensor NVFP4 scale)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, 2, 32, generator=g)
    return (x * torch.logspace(-2, 2, n)[:, None, None, None]).to(dtype)


def reference_kv(kv: torch.Tensor, fmt: str) -> torch.Tensor:
    """Block-by-block FP4 round trip: what the tier must return, bit for bit."""
    from tiered_kv.kernels import fp4

    return torch.cat([fp4.dequantize(fp4.quantize(kv[i:i + BS].contiguous(), fmt))
                      for i in range(0, kv.shape[0] - kv.shape[0] % BS, BS)])


class SuiteBase:
    """The fixture and tier factory every part of the suite uses. Subclasses provide ``make_store``."""

    @pytest.fixture
    def make_store(self):  # pragma: no cover - overridden
        raise NotImplementedError

    def tier(self, store, clock=None, fmt=DEFAULT_FORMAT, **kw) -> SSDTier:
        return make_tier(store, namespace(fmt), clock, **kw)


_CONFIG_FIELDS = {f.name for f in dataclasses.fields(SSDConfig)}


def make_tier(store, ns: Namespace | None = None, clock=None, **settings) -> SSDTier:
    """A tier with access records written inline; ``settings`` may mix SSDConfig fields and
    retention settings (the tests name each the way a user would)."""
    config = {"background_touch": False} | {k: v for k, v in settings.items() if k in _CONFIG_FIELDS}
    retention = {k: v for k, v in settings.items() if k not in _CONFIG_FIELDS}
    return SSDTier(store, namespace=ns or namespace(), clock=clock or Clock(), config=SSDConfig(**config), **retention)

