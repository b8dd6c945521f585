"""Deprecated alias (issue 13; removed after one release): moved to :mod:`tiered_kv.sim.retention.report`."""

from tiered_kv.sim._moved import alias

__getattr__, __dir__ = alias("tiered_kv.sim.retention_report", "tiered_kv.sim.retention.report")
