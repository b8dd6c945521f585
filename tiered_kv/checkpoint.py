"""Checkpoints of the encoder-decoder: saved with their config, loaded with one clear error.

Why a module of its own: every committed checkpoint must keep loading as it was trained, and
a wrong file (missing, truncated, another preset, weights that do not fit) must be refused
naming the file and what differs; that is a contract of its own, apart from the layers.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # tiered_kv.model re-exports this module's functions: import it lazily
    from tiered_kv.model import EncoderDecoder


def save_checkpoint(model: EncoderDecoder, path, meta: dict | None = None, dtype=torch.bfloat16) -> None:
    state = {k: v.to(dtype) for k, v in model.state_dict().items()}
    torch.save({"config": model.cfg.to_dict(), "state_dict": state, "meta": meta or {}}, path)


def load_checkpoint(path, expect_preset: str | None = None, **settings) -> tuple[EncoderDecoder, dict]:
    """Load a checkpoint (weights in fp32 for inference); ``settings`` override W, R, ...

    A missing, truncated or foreign file, a checkpoint of another preset than
    ``expect_preset``, or weights that do not fit the recorded config get one clear error
    naming the file and what differs.
    """
    from tiered_kv.model import EncoderDecoder, ModelConfig

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path}: no such file")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated zip, pickle garbage, wrong format
        raise ValueError(f"checkpoint {path}: not a readable tiered-kv checkpoint (truncated or corrupt: "
                         f"{type(exc).__name__})") from None
    if not isinstance(blob, dict) or "config" not in blob or "state_dict" not in blob:
        raise ValueError(f"checkpoint {path}: not a tiered-kv checkpoint (needs 'config' and 'state_dict')")
    known = set(ModelConfig.__dataclass_fields__)
    unknown = sorted(set(blob["config"]) - known)
    if unknown:
        raise ValueError(f"checkpoint {path}: config has settings this version does not know: {unknown}")
    cfg = replace(ModelConfig(**blob["config"]), **settings)
    if expect_preset is not None and cfg.name != expect_preset:
        raise ValueError(f"checkpoint {path}: is preset {cfg.name!r}, expected {expect_preset!r}")
    model = EncoderDecoder(cfg)
    want = model.state_dict()
    got = blob["state_dict"]
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    shapes = [f"{k}: {tuple(got[k].shape)} vs {tuple(want[k].shape)}" for k in want
              if k in got and tuple(got[k].shape) != tuple(want[k].shape)]
    if missing or extra or shapes:
        detail = "; ".join(x for x in (f"missing {missing[:3]}" if missing else "",
                                       f"unexpected {extra[:3]}" if extra else "",
                                       f"shape {shapes[:3]}" if shapes else "") if x)
        raise ValueError(f"checkpoint {path}: weights do not match its config ({cfg.name}): {detail}")
    model.load_state_dict({k: v.float() for k, v in got.items()})
    model.eval()
    return model, blob.get("meta", {})


def default_checkpoint(preset_name: str = "small"):
    from tiered_kv import DATA_DIR

    return DATA_DIR / "checkpoints" / f"{preset_name}.pt"
