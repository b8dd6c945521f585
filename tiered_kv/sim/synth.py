"""Deprecated alias (issue 13; removed after one release): moved to :mod:`tiered_kv.sim.workload.synth`."""

from tiered_kv.sim._moved import alias

__getattr__, __dir__ = alias("tiered_kv.sim.synth", "tiered_kv.sim.workload.synth")

if __name__ == "__main__":  # python -m tiered_kv.sim.synth
    __getattr__("main")()
