"""The day replay's policies from the strings a user types: LRU capacities and per-class TTLs.

Why here: ``tiered-kv day replay`` and figure 15 name the same policies the same way (``lru 1 PiB``,
``ttl agent=3d chatbot=7d``), so the parsing that gives a policy its name and its numbers is one
function below both.
"""

from __future__ import annotations

import math


def day_policies(capacities, ttls, bytes_per_token: float, block_size: int = 512):
    """({name: capacity blocks}, {name: {class: seconds}}) from the command's strings."""
    from tiered_kv.units import format_bytes, parse_bytes, parse_duration

    if not (1 <= bytes_per_token <= 1e8):
        raise ValueError(f"--bytes-per-token: {bytes_per_token:g} is out of range; allowed: [1, 1e8]")
    caps = {}
    for text in capacities:
        if text.strip().lower() in ("inf", "unlimited"):
            caps["lru unlimited"] = math.inf
            continue
        nbytes = parse_bytes(text, name="--capacity")
        if nbytes <= 0:
            raise ValueError(f"--capacity: {text!r} is out of range; allowed: a size > 0 or 'inf'")
        caps[f"lru {format_bytes(nbytes)}"] = nbytes // (bytes_per_token * block_size)
    out_ttls = {}
    for text in ttls:
        per = {}
        for item in text.split(","):
            cls, dur = item.split("=", 1) if "=" in item else ("*", item)
            seconds = parse_duration(dur.strip(), name=f"--ttl {cls}")
            for c in (("agent", "chatbot") if cls.strip() == "*" else (cls.strip(),)):
                per[c] = seconds
        out_ttls["ttl " + text.replace(",", " ")] = per
    return caps, out_ttls
