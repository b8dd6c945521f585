"""The policy registry and what every policy shares: the protocol, the result type, capacities.

A policy is a frozen, validated config plus a pure function of (config, event stream) ->
decisions: :meth:`Policy.run` reads a :class:`~tiered_kv.sim.trace_replay.CompiledTrace` (the events,
with their simulated clock: the trace's timestamps) and returns, per request, how many leading
blocks were present at lookup (:class:`PolicyRun`). No wall clock, no globals, no randomness.
Counting (hit tokens, warm-up, classes) is the replay engine's job, not the policy's.

Policies register themselves by name with :func:`register_policy` when their module is
imported; this module imports no policy (those shipped above it load by name on a miss:
``_SHIPPED_ELSEWHERE``).

Capacities: ``capacity_tokens`` means ``floor(capacity / block_size)`` block slots (docs/semantics.md);
a capacity in bytes is turned into tokens with the KV format's bytes per token
(:func:`capacity_tokens_from`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from tiered_kv.sim.trace_replay import CompiledTrace
from tiered_kv.units import DEFAULT_BYTES_PER_TOKEN


@dataclass(frozen=True)
class PolicyRun:
    """A policy's decisions: leading blocks present at each request's lookup (replay order)."""

    hit_blocks: np.ndarray
    extra: dict[str, Any] = field(default_factory=dict)


class Policy(Protocol):
    """What the replay engine needs from a policy (a frozen, validated dataclass in practice)."""

    name: ClassVar[str]

    def run(self, trace: CompiledTrace) -> PolicyRun:
        """Leading blocks present at each request's lookup, in the trace's replay order."""
        ...


_REGISTRY: dict[str, type] = {}
#: Modules above this layer that ship policies (kvcache.ai's ``lru-trie``, ``fifo-trie``,
#: ``belady-trie``): imported by name the first time a name is not found, so the registry
#: lists them without importing upwards at start-up.
_SHIPPED_ELSEWHERE = ("tiered_kv.sim.peers.trie_policies",)


def register_policy(cls: type) -> type:
    """Class decorator: make a policy available by its ``name`` (``get_policy(name, ...)``)."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"register_policy: {cls.__name__} needs a class attribute 'name'")
    _REGISTRY[name] = cls
    return cls


def _load_shipped() -> None:
    import importlib

    for module in _SHIPPED_ELSEWHERE:
        importlib.import_module(module)


def get_policy(name: str, **params: Any):
    """A policy object by registered name, configured with ``params``."""
    if name not in _REGISTRY:
        _load_shipped()
    if name not in _REGISTRY:
        raise ValueError(f"policy: must be one of {policy_names()}, got {name!r}")
    return _REGISTRY[name](**params)


def policy_names() -> list[str]:
    """Every registered policy name, sorted (the ones the package ships elsewhere included)."""
    _load_shipped()
    return sorted(_REGISTRY)


def capacity_tokens_from(value: str | int | float | None, *, bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN,
                         name: str = "capacity") -> int | None:
    """Tokens from ``"2000000"`` (tokens), ``"64GiB"`` (bytes / bytes_per_token) or None."""
    from tiered_kv.units import parse_bytes

    if value is None:
        return None
    if isinstance(value, (int, float)):
        if value < 0 or not math.isfinite(value):
            raise ValueError(f"{name}: must be a number of tokens >= 0, got {value!r}")
        return int(value)
    text = value.strip()
    if text.lower() in ("inf", "none", "unlimited"):
        return None
    if re.fullmatch(r"[0-9_]*\.?[0-9]+(?:[eE]\+?[0-9]+)?", text):  # a plain number: tokens
        tokens = float(text.replace("_", ""))
        if not math.isfinite(tokens):  # "1e999": int() would raise OverflowError, a traceback
            raise ValueError(f"{name}: {value!r} tokens is not a finite number; give 'unlimited' for no limit")
        return int(tokens)
    try:
        return int(parse_bytes(text, name=name) // bytes_per_token)
    except ValueError:
        raise ValueError(f"{name}: cannot parse {value!r}; give tokens (e.g. 2000000) or a size in "
                         "bytes with a unit (e.g. 64GiB, 1.5TB)") from None


def check_capacity(name: str, value: int | None) -> None:
    """A capacity in tokens must be an integer >= 0, or None (unlimited)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0):
        raise ValueError(f"{name}: must be an integer number of tokens >= 0 or None (unlimited), got {value!r}")


def capacity_blocks(trace: CompiledTrace, capacity_tokens: int | None) -> float:
    """Block slots of a capacity in tokens (``inf`` when unlimited)."""
    if capacity_tokens is None:
        return math.inf
    return float(capacity_tokens // trace.uniform_block_size)


def check_range(name: str, value: Any, lo: float, hi: float = math.inf, *, integer: bool = False,
                lo_open: bool = False) -> None:
    """``name`` must lie in [lo, hi] (or (lo, hi]); the error names the parameter and the range."""
    ok_type = isinstance(value, (int, np.integer)) if integer else isinstance(value, (int, float, np.number))
    if isinstance(value, bool) or not ok_type or (isinstance(value, float) and math.isnan(value)) \
            or value > hi or value < lo or (lo_open and value == lo):
        kind = "an integer" if integer else "a number"
        left = "(" if lo_open else "["
        raise ValueError(f"{name}: must be {kind} in {left}{lo}, {hi}], got {value!r}")
