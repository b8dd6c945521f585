"""Settings of the contention measurement: flag checks, the grid's order, the model, the prompts.

Everything the measurement decides before it measures anything: bandwidths parsed from the command
line, the ranges of its own flags (the scenario checks its fields itself; :func:`scenario_from`
renames them to the flags), the seeded order the (bandwidth, load, admission) points run in,
which model is loaded, and each request's token ids. Kept apart from the measured runner
(:mod:`.engines`) so that errors come before a model is loaded or a store written.
"""

from __future__ import annotations

import math

import numpy as np

from tiered_kv.sim.cluster import contention as C
from tiered_kv.sim.cluster.shared_compute import POLICIES

DEFAULT_BANDWIDTH_FACTORS = (1.0, 3.0, 10.0)  # x the break-even bandwidth
DEFAULT_LOADS = (0.3, 0.7)
LINKS = ("shared", "split")
#: --admission: which policies of :data:`~tiered_kv.sim.cluster.shared_compute.POLICIES` run; every
#: choice but 'off' runs 'load' too, the baseline the others' paired ratios are taken against.
ADMISSION = {"all": POLICIES, "shared": ("load", "shared"), "own": ("load", "own"), "off": ("load",)}
PRESETS = ("tiny", "small")


def parse_bandwidth(value) -> float:
    """Bytes/s from '256KiB/s', a number or 'inf' (no limit: math.inf)."""
    from tiered_kv.tiers.ssd.bandwidth import parse_rate

    if isinstance(value, str) and value.strip().lower() in ("inf", "none", "unlimited") or value == math.inf:
        return math.inf
    try:
        return parse_rate(value, name="--bandwidths")
    except ValueError as exc:
        raise ValueError(f"--bandwidths: each must be a rate > 0 ('256KiB/s', bytes/s) or 'inf', got {value!r} "
                         f"({exc})") from None


def check_settings(*, loads, calibration: int = 6, calibration_repeats: int = 2, threads: int = 1,
                   repeats: int = 1, link: str = "shared", policies=POLICIES) -> None:
    """Raise ValueError naming the flag of the first setting out of its range."""
    if link not in LINKS:
        raise ValueError(f"--link: must be one of {list(LINKS)}, got {link!r}")
    if not policies or any(p not in POLICIES for p in policies):
        raise ValueError(f"--admission: policies must be among {list(POLICIES)}, got {list(policies)!r}")
    C.check_range("--repeats", repeats, 1, 20, integer=True)
    for x in loads:
        C.check_range("--loads", x, 0.0, 4.0, lo_open=True)
    C.check_range("--calibration", calibration, 2, 64, integer=True)
    C.check_range("--calibration-repeats", calibration_repeats, 1, 10, integer=True)
    C.check_range("--threads", threads, 1, 64, integer=True)


def scenario_from(**kw) -> C.ContentionScenario:
    """A scenario whose errors name the command-line flag (``--streams: must be ...``)."""
    flags = {"suffix_tokens": "--suffix"}
    try:
        return C.ContentionScenario(**kw)
    except ValueError as exc:
        field, _, rest = str(exc).partition(":")
        raise ValueError(f"{flags.get(field, '--' + field.replace('_', '-'))}:{rest}") from None


def request_tokens(i: int, n: int, seed: int):
    """Prompt ``i``: ``n`` byte-level token ids, its own seeded stream (unique prefixes)."""
    import torch

    g = torch.Generator().manual_seed(seed * 1_000_003 + i + 1)
    return torch.randint(0, 256, (int(n),), generator=g)


def run_order(bandwidths, loads, policies, seed: int, round_: int = 0) -> list[tuple[float, float, str]]:
    """One round's points in the order they run: (bandwidth, load) pairs in a shuffle seeded by
    the seed and the round, so a drift of the machine's load over the run lines up neither with
    a bandwidth or a load nor with the same place in every round; the policies of a pair run back
    to back (their ratios are paired), in an order rotated from pair to pair."""
    pairs = [(bw, ld) for bw in bandwidths for ld in loads]
    order = np.random.default_rng([seed, 4, round_]).permutation(len(pairs))
    out = []
    pol = list(policies)
    for k, i in enumerate(order):
        turn = (k + round_) % len(pol)
        out += [(*pairs[i], p) for p in pol[turn:] + pol[:turn]]
    return out
