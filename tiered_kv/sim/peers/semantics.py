"""Named replay semantics: how tiered-kv and the public simulators count hits.

Each preset is :class:`~tiered_kv.sim.trace_replay.ReplayOptions` plus the LRU variant that tool
implements, so ``--semantics kvcache-ai`` reproduces kvcache.ai's numbers with this engine
instead of a copy of theirs. Each preset's rules are its ``description`` (:data:`PRESETS`); they
follow docs/semantics.md (``tiered-kv``), ``kvcache-simulator`` (``kvcache-ai``; its block weights
``min(bs, L - bs*k)`` are the same clamp) and LMCache's cache simulator (``lmcache``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tiered_kv.sim.trace_replay import ReplayOptions


@dataclass(frozen=True)
class Semantics:
    """A named way of counting: replay options plus the policies that play ``lru`` and ``belady``."""

    name: str
    options: ReplayOptions
    lru_policy: str = "lru"
    description: str = ""
    belady_policy: str = "belady"


PRESETS: dict[str, Semantics] = {
    "tiered-kv": Semantics("tiered-kv", ReplayOptions(), "lru",
                           "timestamp order; hit tokens min(p*bs, L); all requests counted"),
    "kvcache-ai": Semantics("kvcache-ai", ReplayOptions(warmup_fraction=0.5, order="file"), "lru-trie",
                            "file order; last 50% counted; trie-leaf LRU", "belady-trie"),
    "lmcache": Semantics("lmcache", ReplayOptions(clamp_to_input=False, full_blocks_only=True), "lru",
                         "timestamp order; complete chunks only; hit tokens p*chunk_size"),
}


def get_semantics(name: str) -> Semantics:
    """A preset by name; the error lists the choices."""
    if name not in PRESETS:
        raise ValueError(f"semantics: must be one of {sorted(PRESETS)}, got {name!r}")
    return PRESETS[name]
