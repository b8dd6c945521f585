"""The three cache tiers: GPU (in-flight), host (per-machine sliding windows), SSD (global KV)."""

from __future__ import annotations

from tiered_kv.units import parse_bytes


def capacity(value: int | float | str, *, tier: str) -> int | float:
    """The GPU and host tiers' ``capacity_bytes``: a number of bytes as given (``inf``: no
    bound) or a size such as "1GiB"; an error names the tier's setting."""
    cap = parse_bytes(value, name=f"{tier} capacity_bytes") if isinstance(value, str) else value
    if not isinstance(cap, (int, float)) or cap < 0:
        raise ValueError(f"{tier} capacity_bytes: must be >= 0 bytes, got {value!r}")
    return cap
