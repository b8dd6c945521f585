"""One request through the three tiers, with the bytes each tier holds (notebook 00).

A :class:`Tour` runs a cold prefill on an engine whose SSD tier is a Zarr v3 store in a fresh
folder, a follow-up sharing its prefix on the same machine, and one on a second machine with an
empty host tier (bounded replay). Every frame it returns is read from the tiers themselves: files
on disk, chunk headers, host entries, stage timings.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import altair as alt
import polars as pl

#: Prompt bytes of the first request at each notebook size (the model is byte-level).
PROMPT_BYTES = {"small": 1536, "full": 4096}
#: Bytes of the second request beyond the shared prefix.
SUFFIX_BYTES = 200


def notebook_model(size: str):
    """(the trained ``small`` checkpoint, its metadata) at full size when it exists; else (the
    ``tiny`` preset with weights drawn from seed 0, None)."""
    import torch

    from tiered_kv.model import EncoderDecoder, default_checkpoint, load_checkpoint, preset

    path = default_checkpoint("small")
    if size == "full" and path.exists():
        return load_checkpoint(path)
    torch.manual_seed(0)
    return EncoderDecoder(preset("tiny")).eval(), None


def tour_model(size: str):
    """(model, description) of :func:`notebook_model`: the tour is about where the bytes go, which
    does not depend on the weights."""
    from tiered_kv.model import default_checkpoint

    model, meta = notebook_model(size)
    if meta is None:
        return model, "tiny preset, seeded random weights (untrained)"
    steps, loss = meta.get("train", {}).get("steps"), meta.get("final_heldout_loss_nats")
    about = ", ".join(x for x in (f"{steps} steps" if steps else "",
                                  f"held-out loss {loss:.3f} nats/byte" if loss else "") if x)
    return model, f"trained checkpoint {default_checkpoint('small').name}" + (f" ({about})" if about else "")


def prompt_text(n_bytes: int) -> bytes:
    """A real document as the prompt: the source of :mod:`json.decoder` from the standard library."""
    import json.decoder
    import pathlib

    text = pathlib.Path(json.decoder.__file__).read_bytes()
    return (text * (n_bytes // len(text) + 1))[:n_bytes]


@dataclass
class Tour:
    size: str
    root: Path
    model_description: str = ""
    requests: list[tuple[str, Any]] = field(default_factory=list)  # (name, the engine's PrefillResult)

    def __post_init__(self) -> None:
        from tiered_kv.engine import Engine, namespace_for
        from tiered_kv.tiers.ssd import SSDConfig, SSDTier

        self.model, self.model_description = tour_model(self.size)
        cfg = self.model.cfg
        self.namespace = namespace_for(self.model, block_size=min(256, cfg.window * 4))
        self.ssd = SSDTier(self.root / "ssd.zarr", namespace=self.namespace, ttl={"chatbot": "7d"},
                           config=SSDConfig(background_touch=False))
        self.engine = Engine(self.model, self.ssd, name="machine0")
        self.prompt = prompt_text(PROMPT_BYTES[self.size])

    def _tokens(self, data: bytes):
        import torch

        return torch.tensor(list(data), dtype=torch.long)

    def run(self, name: str, data: bytes, engine=None) -> None:
        """Prefill ``data`` on ``engine`` (default: machine0) as a chatbot request; record it."""
        self.requests.append((name, (engine or self.engine).prefill(self._tokens(data), "chatbot")))
        self.ssd.flush()

    def run_all(self) -> pl.DataFrame:
        """Cold request; follow-up on the same machine; follow-up on a second machine."""
        from tiered_kv.engine import Engine

        self.run("1 cold", self.prompt)
        follow = self.prompt + b"\n# a follow-up turn appends new text to the same prefix\n"[:SUFFIX_BYTES]
        self.run("2 follow-up, same machine", follow)
        self.other = Engine(self.model, self.ssd, name="machine1")  # shares the SSD tier only
        self.run("3 follow-up, other machine", follow, engine=self.other)
        return self.requests_frame()

    def requests_frame(self) -> pl.DataFrame:
        return pl.DataFrame([
            {"request": name, "tokens": r.n_tokens, "ssd_hit_tokens": r.hit_tokens["ssd"],
             "host_hit_tokens": r.hit_tokens["host"], "encoder_tokens": r.computed_tokens.get("encoder_suffix", 0),
             "encoder_replay_tokens": r.computed_tokens.get("encoder_replay", 0),
             "decoder_tokens": r.computed_tokens.get("decoder", 0), "chunks_written": r.stored_blocks,
             "ttft_ms": 1e3 * r.ttft_s, "next_token": r.next_token}
            for name, r in self.requests
        ])

    def timings_frame(self) -> pl.DataFrame:
        return pl.DataFrame([{"request": name, "stage": s, "ms": 1e3 * t}
                             for name, r in self.requests for s, t in r.timings_s.items()])

    def files_frame(self) -> pl.DataFrame:
        """Every file of the Zarr store on disk, with its size in bytes."""
        base = self.root / "ssd.zarr"
        rows = [{"path": str(p.relative_to(base)), "bytes": p.stat().st_size}
                for p in sorted(base.rglob("*")) if p.is_file()]
        return pl.DataFrame(rows, schema={"path": pl.Utf8, "bytes": pl.Int64})

    def chunks_frame(self) -> pl.DataFrame:
        """Headers of the chunks the follow-up read back (key, block index, format, bytes)."""
        hit = self.ssd.get_prefix(self._tokens(self.prompt), "chatbot")
        return pl.DataFrame([
            {"block": h.index, "key": h.key.hex()[:16], "fmt": h.fmt, "tokens": h.tokens,
             "traffic_class": h.traffic_class, "stored_bytes": h.nbytes, "payload_bytes": h.payload_len,
             "bf16_bytes": h.tokens * 2 * h.kv_heads * h.head_dim * 2}
            for h in hit.headers
        ])

    def tiers_frame(self) -> pl.DataFrame:
        """Bytes held by each tier of each machine after the three requests."""
        stats = self.ssd.stats()
        rows = [{"tier": "SSD (shared, Zarr v3 on disk)", "machine": "all", "entries": stats["chunks"],
                 "bytes": stats["bytes"]}]
        for eng in (e for e in (self.engine, getattr(self, "other", None)) if e is not None):
            rows += [{"tier": tier, "machine": eng.name, "entries": len(t), "bytes": int(t.used_bytes)}
                     for tier, t in (("host (window caches)", eng.host), ("GPU (in flight)", eng.gpu))]
        return pl.DataFrame(rows)

    def timings_chart(self) -> alt.Chart:
        return alt.Chart(self.timings_frame()).mark_bar().encode(
            alt.Y("request:N", title=None),
            alt.X("ms:Q", stack="zero", title="time per stage (milliseconds, this machine)"),
            alt.Color("stage:N"),
            tooltip=["request", "stage", alt.Tooltip("ms:Q", format=".2f")],
        ).properties(width=520, height=120, title="prefill stages")

    def close(self) -> None:
        self.ssd.close()


def start_tour(size: str | None = None, root: str | Path | None = None) -> Tour:
    """A tour with its store in ``root`` (default: a new temporary folder), all requests run."""
    from tiered_kv.viz import notebook_size, torch_threads

    size = notebook_size(size)
    folder = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="tiered-kv-tour-"))
    with torch_threads(1 if size == "small" else 2):
        tour = Tour(size, folder)
        tour.run_all()
    return tour
