"""Parsing and formatting of the units users type: durations (s/m/h/d) and sizes (B..PiB, tokens).

Every setting that takes a duration or a size goes through here so that errors read the same
everywhere: they name the setting and the accepted forms.
"""

from __future__ import annotations

import math
import re

_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_BYTE_UNITS = {
    "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
}
_NUM = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"


def parse_duration(value: str | float | int, *, name: str = "duration") -> float:
    """Seconds from ``90``, ``"90s"``, ``"15m"``, ``"6h"`` or ``"3d"``; ``"inf"`` means forever.

    Raises ``ValueError`` naming ``name`` for negative or malformed values.
    """
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = value.strip().lower()
        if text in ("inf", "infinite", "forever", "none"):
            return math.inf
        m = re.fullmatch(_NUM + r"\s*([smhd]?)", text)
        if not m:
            raise ValueError(
                f"{name}: cannot parse {value!r} as a duration; use a number of seconds or "
                "a number followed by s, m, h or d (e.g. 90s, 15m, 6h, 3d), or 'inf'"
            )
        seconds = float(m.group(1)) * _DURATION_UNITS[m.group(2) or "s"]
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"{name}: must be a duration >= 0 seconds, got {value!r}")
    return seconds


def parse_bytes(value: str | float | int, *, name: str = "size") -> int:
    """Bytes from ``1000000``, ``"64MiB"``, ``"1.5GB"`` or ``"100PiB"`` (decimal and binary units)."""
    if isinstance(value, (int, float)):
        size = float(value)
    else:
        m = re.fullmatch(_NUM + r"\s*([a-z]*)", value.strip().lower())
        if not m or (m.group(2) or "b") not in _BYTE_UNITS:
            raise ValueError(
                f"{name}: cannot parse {value!r} as a size; use bytes or a number followed by "
                "B, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB or PiB"
            )
        size = float(m.group(1)) * _BYTE_UNITS[m.group(2) or "b"]
    if math.isnan(size) or size < 0:
        raise ValueError(f"{name}: must be a size >= 0 bytes, got {value!r}")
    return int(size)


def format_duration(seconds: float) -> str:
    """Short human form: ``45s``, ``12.5m``, ``3h``, ``7d``."""
    if math.isinf(seconds):
        return "inf"
    for unit, scale in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= scale:
            return f"{seconds / scale:g}{unit}"
    return f"{seconds:g}s"


def format_bytes(n: float) -> str:
    """Binary units: ``890 B``, ``1.5 MiB``, ``100 PiB``."""
    for unit in ("PiB", "TiB", "GiB", "MiB", "KiB"):
        scale = _BYTE_UNITS[unit.lower()]
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"
