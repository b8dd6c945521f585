"""GPU tier: the in-flight KV of running requests.

A request that has been prefilled keeps, until it is released, everything decoding needs: its
tokens, the full global KV (one K/V per token, FP4 round-tripped exactly as the SSD tier
returns it) and the window caches of every sliding-window layer. The tensors live on
``device`` (CPU tensors on this machine; the same code holds CUDA tensors on a GPU). Capacity
is in bytes; admitting past it is an error rather than a silent eviction, because an
in-flight request cannot be dropped without failing it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tiered_kv.model import WindowState
from tiered_kv.tiers import capacity


@dataclass
class InFlight:
    """One running request's KV: global KV for [0, len(tokens)) and windows at len(tokens)."""

    request_id: str
    tokens: torch.Tensor
    global_kv: torch.Tensor  # [T, 2, Hkv, D]
    encoder: WindowState
    decoder: WindowState
    traffic_class: str = "default"

    @property
    def nbytes(self) -> int:
        return (self.global_kv.numel() * self.global_kv.element_size() + self.encoder.nbytes
                + self.decoder.nbytes)


class GPUTier:
    """Running requests by id, with a byte budget."""

    def __init__(self, capacity_bytes: int | float | str = float("inf"), device: str = "cpu") -> None:
        self.capacity_bytes = capacity(capacity_bytes, tier="gpu")
        self.device = torch.device(device)
        self._running: dict[str, InFlight] = {}
        self.used_bytes = 0

    def __len__(self) -> int:
        return len(self._running)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._running

    def admit(self, state: InFlight) -> None:
        if state.request_id in self._running:
            raise ValueError(f"request {state.request_id!r}: already running on this GPU tier")
        if self.used_bytes + state.nbytes > self.capacity_bytes:
            raise ValueError(f"request {state.request_id!r}: needs {state.nbytes} bytes, "
                             f"{self.capacity_bytes - self.used_bytes:.0f} free on the GPU tier")
        self._running[state.request_id] = state
        self.used_bytes += state.nbytes

    def get(self, request_id: str) -> InFlight:
        if request_id not in self._running:
            raise ValueError(f"request {request_id!r}: not running on this GPU tier")
        return self._running[request_id]

    def update(self, state: InFlight, old_nbytes: int) -> None:
        self.used_bytes += state.nbytes - old_nbytes

    def release(self, request_id: str) -> InFlight:
        state = self.get(request_id)
        del self._running[request_id]
        self.used_bytes -= state.nbytes
        return state
