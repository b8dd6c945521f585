"""The connector's settings: one frozen dataclass read from vLLM's ``kv_connector_extra_config``.

Why a dataclass and not vLLM's dict: a typo in a key (``"fromat"``) or a value out of range must
stop the engine at start-up with one line that names the key and the allowed values, not turn
into a silent default that stores nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from tiered_kv import keys

#: KV formats of the engine's blocks on the tier: bf16 is byte-exact, the FP4 ones are lossy.
FORMATS = ("bf16", *keys.FORMATS)
#: The vLLM builds whose connector API and CPU tile layout this connector was written against.
SUPPORTED_VLLM = ("0.32.0",)


@dataclass(frozen=True, kw_only=True)
class ConnectorSettings:
    """``store``: a directory or ``s3://bucket/prefix``; ``fmt``: one of :data:`FORMATS`;
    ``traffic_class``: the class of a request that names none in ``kv_transfer_params``;
    ``ttl``: one duration for every class or ``{class: duration}``; ``capacity_bytes``: the
    tier's watermark capacity (int or "10GiB"); ``traffic_classes``: the declared classes (None:
    any); ``capture``: a JSONL file to append one line per request to (None: no capture);
    ``gc_each_request``: run the tier's GC before each lookup (TTL expiry exactly at request
    times, what the simulator's ``ttl`` policy does; costs a store scan per request).
    """

    store: str
    fmt: str = "bf16"
    traffic_class: str = "default"
    ttl: Any = None
    capacity_bytes: Any = math.inf
    traffic_classes: tuple[str, ...] | None = None
    capture: str | None = None
    gc_each_request: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.store, str) or not self.store:
            raise ValueError("kv_connector_extra_config['store']: must be a directory or an s3://bucket/prefix URL")
        if self.fmt not in FORMATS:
            raise ValueError(f"kv_connector_extra_config['fmt']: must be one of {list(FORMATS)}, got {self.fmt!r}")
        if not isinstance(self.traffic_class, str) or not self.traffic_class:
            raise ValueError("kv_connector_extra_config['traffic_class']: must be a non-empty string, "
                             f"got {self.traffic_class!r}")
        if self.traffic_classes is not None:
            object.__setattr__(self, "traffic_classes", tuple(self.traffic_classes))
            if self.traffic_class not in self.traffic_classes:
                raise ValueError(f"kv_connector_extra_config['traffic_class']: {self.traffic_class!r} is not one "
                                 f"of the declared traffic_classes {list(self.traffic_classes)}")
        if self.capture is not None and (not isinstance(self.capture, str) or not self.capture):
            raise ValueError(f"kv_connector_extra_config['capture']: must be a file path, got {self.capture!r}")
        if not isinstance(self.gc_each_request, bool):
            raise ValueError("kv_connector_extra_config['gc_each_request']: must be true or false, "
                             f"got {self.gc_each_request!r}")

    @classmethod
    def from_extra_config(cls, extra: Mapping[str, Any]) -> ConnectorSettings:
        """Settings from ``kv_connector_extra_config``; an unknown key is an error naming the known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(extra) - known)
        if unknown:
            raise ValueError(f"kv_connector_extra_config: unknown key(s) {unknown}; known keys: {sorted(known)}")
        if "store" not in extra:
            raise ValueError("kv_connector_extra_config['store']: missing; set it to a directory or s3://bucket/prefix")
        return cls(**dict(extra))


def open_tier(settings: ConnectorSettings, namespace):
    """The connector's :class:`~tiered_kv.tiers.ssd.SSDTier`; a store that cannot be opened is one line.

    A bad setting stays the tier's own ``ValueError`` (it names the setting); anything else (an
    unreachable bucket, a folder that cannot be written) becomes a ``RuntimeError`` naming the
    store and what to check.
    """
    from tiered_kv.tiers.ssd import SSDTier

    try:
        return SSDTier(settings.store, namespace=namespace, capacity_bytes=settings.capacity_bytes,
                       ttl=settings.ttl, traffic_classes=settings.traffic_classes, clock=time.time)
    except Exception as exc:  # noqa: BLE001 - an unreachable bucket or unwritable folder: one line
        if isinstance(exc, ValueError) and type(exc).__name__ != "StoreAccessError":
            raise  # a bad setting: the tier's message names it
        text = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise RuntimeError(f"kv_connector_extra_config['store']: cannot open {settings.store!r} ({text}); check "
                           "the path or URL and its credentials (AWS_* variables for s3://)") from None
