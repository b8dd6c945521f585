"""Deprecated alias (issue 13; removed after one release): moved to :mod:`tiered_kv.sim.retention.occupancy`."""

from tiered_kv.sim._moved import alias

__getattr__, __dir__ = alias("tiered_kv.sim.retention_occupancy", "tiered_kv.sim.retention.occupancy")
