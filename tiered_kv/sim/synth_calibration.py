"""Deprecated alias (issue 13; removed after one release), moved to
:mod:`tiered_kv.sim.workload.calibration`.
"""

from tiered_kv.sim._moved import alias

__getattr__, __dir__ = alias("tiered_kv.sim.synth_calibration", "tiered_kv.sim.workload.calibration")

if __name__ == "__main__":  # python -m tiered_kv.sim.synth_calibration
    __getattr__("main")()
