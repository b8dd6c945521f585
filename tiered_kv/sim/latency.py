"""Deprecated alias (issue 13; removed after one release): moved to :mod:`tiered_kv.sim.cluster.latency`."""

from tiered_kv.sim._moved import alias

__getattr__, __dir__ = alias("tiered_kv.sim.latency", "tiered_kv.sim.cluster.latency")
