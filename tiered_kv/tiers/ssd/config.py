"""How an SSD tier drives its store: I/O, background work, grace periods, emulated bandwidth.

What the tier keeps (capacity, watermarks, TTLs, classes) is a :class:`RetentionPolicy`, a
property of the cache a simulator can reason about; this is the rest, properties of one
process's client. Both are frozen and checked when made, so a tier never holds a setting it
cannot honour, and an error names the setting the user typed.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiered_kv.tiers.ssd.bandwidth import parse_rate
from tiered_kv.tiers.ssd.layout import IO_CONCURRENCY, check_io
from tiered_kv.units import parse_duration


@dataclass(frozen=True)
class SSDConfig:
    """Client settings of an :class:`~tiered_kv.tiers.ssd.SSDTier`; sizes and durations may be strings.

    ``io_threads``: threads per batch on stores with zarr's sync API (1 = the caller's; 0 forces
    zarr's async API). ``io_concurrency``: requests in flight on async stores. ``background_touch``:
    write a hit's access record in a background thread (off the read path). ``auto_gc`` (with a
    finite capacity): after each put, run ``gc`` when the store's shared usage estimate is above
    the high watermark (the bound this gives under concurrent writers is in
    :mod:`tiered_kv.tiers.ssd.usage`). ``gc_interval``: also run ``gc`` in a background thread
    that often. ``orphan_grace``/``partial_grace``: how old an orphan chunk / a ``.partial`` file
    must be before GC removes it (a live writer may still own it). ``precreate_shards``: create the
    16 shard directories of a local directory now rather than on first use.
    ``read_bandwidth``/``write_bandwidth`` (bytes/s or "2GiB/s"): an experiment knob emulating a
    client's link, shared by every tier of this process group on the same store;
    ``link_bandwidth``: one limit reads and writes share, instead of those two.
    """

    io_threads: int = 1
    io_concurrency: int = IO_CONCURRENCY
    background_touch: bool = True
    auto_gc: bool = True
    gc_interval: float | str | None = None
    orphan_grace: float | str = 60.0
    partial_grace: float | str = 300.0
    precreate_shards: bool = False
    read_bandwidth: float | str | None = None
    write_bandwidth: float | str | None = None
    link_bandwidth: float | str | None = None

    def __post_init__(self) -> None:
        check_io(self.io_threads, self.io_concurrency, concurrency_name="io_concurrency")
        for name in ("orphan_grace", "partial_grace"):
            object.__setattr__(self, name, parse_duration(getattr(self, name), name=name))
        if self.gc_interval is not None:
            interval = parse_duration(self.gc_interval, name="gc_interval")
            if not interval > 0:
                raise ValueError(f"gc_interval: must be > 0 seconds, got {self.gc_interval!r}")
            object.__setattr__(self, "gc_interval", interval)
        for name in ("read_bandwidth", "write_bandwidth", "link_bandwidth"):
            object.__setattr__(self, name, parse_rate(getattr(self, name), name=name))
        if self.link_bandwidth is not None and (self.read_bandwidth is not None or self.write_bandwidth is not None):
            raise ValueError("link_bandwidth: one limit for reads and writes together; leave read_bandwidth "
                             "and write_bandwidth unset with it")
