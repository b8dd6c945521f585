"""Engine blocks <-> the SSD tier's per-token KV, and the namespace that makes them incompatible.

The tier stores one chunk per block of tokens, holding ``[block_size, 2, heads, head_dim]`` (K and
V of every token). An engine with L attention layers of H KV heads has L*H (layer, head) pairs
per token, so the tier sees a model with ``heads = L * H``: every layer's KV of one block goes into
one chunk, a hit loads every layer at once, and the FP4 codec quantizes along ``head_dim`` per
(token, layer, head) exactly as it does for the workbench's own global KV. Nothing about the tier
changes for the engine; the chunk header still says what it holds.

The namespace's model string folds in the weights' fingerprint, the tile layout (ISA and the
permutation's hash), the number of layers and the cache dtype: two models, or two builds that
pack tiles differently, never share a key.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from tiered_kv.connectors.cpu_layout import TileLayout
from tiered_kv.keys import Namespace


def model_fingerprint(model: str) -> str:
    """A short hash of a model directory's config and weights (size + first MiB of each file).

    A hub name that is not a local directory hashes to its name: the engine then loaded it from
    a cache the connector cannot see, and the name is the best identity it has.
    """
    h = hashlib.blake2b(digest_size=8)
    path = Path(model)
    h.update(str(path.name).encode())
    if path.is_dir():
        for f in sorted(path.iterdir()):
            if f.suffix in (".json", ".safetensors", ".bin") and f.is_file():
                h.update(f.name.encode())
                h.update(f.stat().st_size.to_bytes(8, "little"))
                with open(f, "rb") as fh:
                    h.update(fh.read(1 << 20))
    return h.hexdigest()


def engine_namespace(*, model: str, layout: TileLayout, layers: int, kv_heads: int, fmt: str) -> Namespace:
    """The tier namespace of one engine's bf16 KV (the connector refuses any other cache dtype)."""
    tag = json.dumps({"engine": "vllm", "model": Path(model).name, "weights": model_fingerprint(model),
                      "layout": f"LBHNC/{layout.isa}/{layout.fingerprint}", "layers": layers,
                      "kv_heads": kv_heads, "dtype": "bfloat16"}, sort_keys=True, separators=(",", ":"))
    return Namespace(model=tag, fmt=fmt, block_size=layout.block_size, kv_heads=layers * kv_heads,
                     head_dim=layout.head_size)


def gather_blocks(caches: list[torch.Tensor], layout: TileLayout, block_ids: list[int]) -> torch.Tensor:
    """KV of ``block_ids`` from per-layer caches -> ``[n * block_size, 2, L * H, head_dim]``."""
    idx = torch.as_tensor(block_ids, dtype=torch.int64)
    per_layer = torch.stack([layout.unpack(c[idx]) for c in caches])  # [L, n, H, 2, bs, D]
    n_layers, n, heads, _, bs, dim = per_layer.shape
    return per_layer.permute(1, 4, 3, 0, 2, 5).reshape(n * bs, 2, n_layers * heads, dim)


def scatter_blocks(caches: list[torch.Tensor], layout: TileLayout, block_ids: list[int],
                   kv: torch.Tensor) -> None:
    """Write ``kv`` (``[n * block_size, 2, L * H, head_dim]``) into ``block_ids`` of every layer."""
    n_layers = len(caches)
    heads = caches[0].shape[1]
    bs, dim = layout.block_size, layout.head_size
    n = len(block_ids)
    per_layer = kv.reshape(n, bs, 2, n_layers, heads, dim).permute(3, 0, 4, 2, 1, 5)  # [L, n, H, 2, bs, D]
    idx = torch.as_tensor(block_ids, dtype=torch.int64)
    for layer, cache in enumerate(caches):
        cache[idx] = layout.pack(per_layer[layer].to(cache.dtype))


def foreign_namespaces(store: str, namespace: Namespace) -> str | None:
    """One line when a local store holds engine KV of other models or layouts and none of this one.

    Nothing is wrong with such a store (namespaces keep the bytes apart), but an engine pointed at
    it expecting hits gets none; the line says why and what to do. Object stores are not listed
    (a listing per engine start costs requests); None when there is nothing to say.
    """
    folder = Path(store) / "namespaces"
    if "://" in store or not folder.is_dir():
        return None
    others = []
    for meta in sorted(folder.glob("*/zarr.json")):
        try:
            ns = json.loads(meta.read_text())["attributes"]["tiered_kv_namespace"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if ns.get("digest") == namespace.digest.hex():
            return None
        others.append(f"{ns.get('model', '?')} ({ns.get('fmt')}, {ns.get('block_size')}-token blocks)")
    if not others:
        return None
    return (f"store {store} holds KV of {len(others)} other model(s)/layout(s), e.g. {others[0]}, and none of this "
            f"engine's ({namespace.model}, {namespace.fmt}, {namespace.block_size}-token blocks): nothing will hit "
            "until this engine has stored its own; use that model and layout, or a new store directory")
