"""Parsing and formatting of the units users type: durations (s/m/h/d) and sizes (B..PiB, tokens).

Every setting that takes a duration or a size goes through here so that errors read the same
everywhere: they name the setting and the accepted forms.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType

#: Seconds in a day: the one definition (traces, TTLs and retention all count days of 86,400 s).
DAY_S = 86_400.0
HOUR_S = 3_600.0
#: The TTL in days DeepSeek gives every class other than agent (chatbot's included).
DEEPSEEK_DEFAULT_TTL_DAYS = 7.0
#: DeepSeek's published retention in days: agent traffic 3, chatbot traffic (and every other class) 7.
DEEPSEEK_TTL_DAYS: Mapping[str, float] = MappingProxyType(
    {"agent": 3.0, "chatbot": DEEPSEEK_DEFAULT_TTL_DAYS})  # read-only
#: The same as ``--ttl`` text (``agent=3d,chatbot=7d``), as the commands and sweeps read it.
DEEPSEEK_TTL_SPEC = ",".join(f"{c}={d:g}d" for c, d in DEEPSEEK_TTL_DAYS.items())
#: DeepSeek-V3 MLA KV elements per token: 61 layers x (512 latent + 64 rope) (tiered_kv.arch.DEEPSEEK_V3,
#: which imports torch; a test pins the two together).
DEEPSEEK_V3_KV_ELEMENTS = 61 * (512 + 64)
#: Default KV size for byte capacities: DeepSeek-V3 MLA in bf16, 70,272 bytes per token. Pass
#: another value for other models or FP4.
DEFAULT_BYTES_PER_TOKEN = DEEPSEEK_V3_KV_ELEMENTS * 2
_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": HOUR_S, "d": DAY_S}
BYTE_UNITS = {
    "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
}
_NUM = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"


_DURATION_PART = re.compile(_NUM + r"\s*([smhd]?)")


def parse_duration(value: str | float | int, *, name: str = "duration") -> float:
    """Seconds from ``90``, ``"90s"``, ``"15m"``, ``"6h"``, ``"3d"`` or ``"2 d 23 h"``; ``"inf"`` is forever.

    Compound forms (what :func:`format_duration` writes, e.g. ``"17 m 20 s"``) add their parts.
    Raises ``ValueError`` naming ``name`` for negative or malformed values.
    """
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = value.strip().lower()
        if text in ("inf", "infinite", "forever", "none"):
            return math.inf
        if text.startswith("-") and _DURATION_PART.fullmatch(text[1:].strip()):
            raise ValueError(f"{name}: must be a duration >= 0 seconds, got {value!r}")
        parts = _DURATION_PART.findall(text)
        if not re.fullmatch(r"(?:" + _NUM + r"\s*[smhd]?\s*)+", text) or (
                len(parts) > 1 and any(not unit for _, unit in parts)):
            raise ValueError(
                f"{name}: cannot parse {value!r} as a duration; use a number of seconds or "
                "a number followed by s, m, h or d (e.g. 90s, 15m, 6h, 3d, 2 d 12 h), or 'inf'"
            )
        seconds = sum(float(num) * _DURATION_UNITS[unit or "s"] for num, unit in parts)
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"{name}: must be a duration >= 0 seconds, got {value!r}")
    return seconds


#: The one grammar of a per-class TTL (``--ttl`` of simulate, store gc and day replay; a sweep's ``ttl``).
TTL_FORM = ("a duration (90s, 15m, 6h, 3d, inf) for every class, or CLASS=DURATION, "
            "several joined by commas (agent=3d,chatbot=7d)")


def parse_ttl(value: str | Sequence[str] | Mapping[str, str | float], *,
              name: str = "ttl") -> tuple[dict[str, float], float | None]:
    """``"agent=3d,chatbot=7d"``, ``"7d"``, a list of those (a repeated flag) or a table
    ``{class: duration}`` -> ({class: seconds}, seconds for every other class or None).

    A class's own TTL beats the bare duration wherever each is written; of two bare durations,
    or two for one class, the last wins.
    """
    if isinstance(value, Mapping):
        items = [(str(c), d) for c, d in value.items()]
    elif isinstance(value, str) or (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)):
        texts = [value] if isinstance(value, str) else value
        items = [tuple(p.split("=", 1)) if "=" in p else (None, p) for t in texts for p in t.split(",")]
    else:
        raise ValueError(f"{name}: {value!r} is out of range; allowed: {TTL_FORM}")
    per_class, default = {}, None
    for cls, dur in items:
        if cls is not None and not cls.strip():
            raise ValueError(f"{name}: {f'{cls}={dur}'!r} has no class name; allowed: {TTL_FORM}")
        where = name if cls is None else f"{name} {cls.strip()}"
        try:
            seconds = parse_duration(dur, name=where)
        except (ValueError, TypeError, AttributeError):
            raise ValueError(f"{where}: {dur!r} is out of range; allowed: {TTL_FORM}") from None
        if cls is None:
            default = seconds
        else:
            per_class[cls.strip()] = seconds
    return per_class, default


def parse_bytes(value: str | float | int, *, name: str = "size") -> int:
    """Bytes from ``1000000``, ``"64MiB"``, ``"1.5GB"`` or ``"100PiB"`` (decimal and binary units)."""
    if isinstance(value, (int, float)):
        size = float(value)
    else:
        m = re.fullmatch(_NUM + r"\s*([a-z]*)", value.strip().lower())
        if not m or (m.group(2) or "b") not in BYTE_UNITS:
            raise ValueError(
                f"{name}: cannot parse {value!r} as a size; use bytes or a number followed by "
                "B, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB or PiB"
            )
        size = float(m.group(1)) * BYTE_UNITS[m.group(2) or "b"]
    if math.isnan(size) or size < 0:
        raise ValueError(f"{name}: must be a size >= 0 bytes, got {value!r}")
    if math.isinf(size):  # (int() of it would raise OverflowError, a traceback instead of this line)
        raise ValueError(f"{name}: must be a finite size in bytes, got {value!r}")
    return int(size)


_DURATION_STEPS = (("d", int(DAY_S)), ("h", int(HOUR_S)), ("m", 60), ("s", 1))


def format_duration(seconds: float) -> str:
    """Human form, at most two units, rounded to the smaller: ``45 s``, ``17 m 20 s``, ``3 d``, ``2 d 23 h``.

    Under a minute: three significant digits (``0.25 s``, ``12.5 s``). :func:`parse_duration`
    reads every form back (to the precision shown). ``inf`` for an unlimited duration.
    """
    seconds = float(seconds)
    if math.isinf(seconds):
        return "inf"
    if math.isnan(seconds):
        return "n/a"
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if round(seconds, 1) < 60:
        return f"{_sig3(seconds)} s"
    for i, (unit, scale) in enumerate(_DURATION_STEPS[:-1]):
        if seconds >= scale * (1 - 1 / 120):
            small_unit, small = _DURATION_STEPS[i + 1]
            total = round(seconds / small)  # in the smaller unit
            big, rest = divmod(total, scale // small)
            if big == 0:  # rounded down below one of the larger unit
                return f"{rest} {small_unit}"
            return f"{big} {unit}" + (f" {rest} {small_unit}" if rest else "")
    raise AssertionError(seconds)  # >= 60 s always matches a unit above


def _sig3(x: float) -> str:
    """Three significant digits, never in exponent form: ``0.25``, ``12.5``, ``890``, ``1024``."""
    if x == 0:
        return "0"
    ax = abs(x)
    decimals = 0 if ax >= 100 else 1 if ax >= 10 else 2 if ax >= 1 else max(2, 2 - math.floor(math.log10(ax)))
    text = f"{x:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def format_bytes(n: float) -> str:
    """Binary units, three significant digits: ``890 B``, ``1.5 MiB``, ``1 TiB``, ``24.6 TiB``."""
    steps = [(f" {u}", BYTE_UNITS[u.lower()]) for u in ("PiB", "TiB", "GiB", "MiB", "KiB")]
    return _scaled(n, steps, "{:.0f} B")


def _scaled(n: float, steps, below: str) -> str:
    """``n`` in the first of ``steps`` (suffix, scale) it reaches, three significant digits;
    ``below.format(n)`` under them all; ``n/a`` or ``unlimited`` when not finite."""
    n = float(n)
    if not math.isfinite(n):
        return "n/a" if math.isnan(n) else "unlimited"
    for suffix, scale in steps:
        if abs(n) >= scale * (1 - 0.0005):
            return f"{_sig3(n / scale)}{suffix}"
    return below.format(n)


_TOKEN_UNITS = {"T": 10**12, "B": 10**9, "M": 10**6, "K": 10**3}


def format_tokens(n: float) -> str:
    """Token counts: ``512 tokens``, ``9,000 tokens``, ``12.3K tokens``, ``4.5M tokens``, ``1.2B tokens``.

    Exact with thousands separators under 10,000; K/M/B/T (decimal) with three significant
    digits above. :func:`parse_tokens` reads every form back.
    """
    steps = [(f"{u} tokens", scale) for u, scale in _TOKEN_UNITS.items()]
    return _scaled(n, steps if abs(float(n)) >= 10_000 else [], "{:,.0f} tokens")


def parse_tokens(value: str | float | int, *, name: str = "tokens") -> int:
    """Tokens from ``4096``, ``"9,000"``, ``"12.3K"``, ``"4.5M tokens"`` or ``"1e6"``."""
    if isinstance(value, (int, float)):
        count = float(value)
    else:
        text = value.strip().lower().replace(",", "").replace("_", "")
        text = re.sub(r"\s*tokens?$", "", text)
        m = re.fullmatch(r"(-?)" + _NUM + r"\s*([kmbt]?)", text)
        if not m:
            raise ValueError(f"{name}: cannot parse {value!r} as a token count; use a number, "
                             "optionally followed by K, M, B or T (e.g. 4096, 12K, 4.5M)")
        count = float(m.group(2)) * _TOKEN_UNITS.get(m.group(3).upper(), 1) * (-1 if m.group(1) else 1)
    if math.isnan(count) or count < 0:
        raise ValueError(f"{name}: must be a token count >= 0, got {value!r}")
    return int(round(count))
