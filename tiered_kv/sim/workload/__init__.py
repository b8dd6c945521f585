"""Workloads: multi-day, multi-class synthetic traffic, and its calibration on real traces.

:mod:`.synth` draws weeks of chatbot and agent sessions (Poisson arrivals with a daily cycle,
growing prompts, returns after heavy-tailed gaps) straight into the trace frame of
:mod:`tiered_kv.sim.traces`, from one explicit seed; :mod:`.calibration` measures the same
statistics on a real trace and on a generated one and sets them beside their targets
(Mooncake's conversation trace, its published Tool&Agent numbers, DeepSeek's 3-day/7-day
effect). This package may import :mod:`tiered_kv.sim.traces` and :mod:`tiered_kv.units` only.
"""

from tiered_kv.sim.workload.calibration import (
    CURVE_CAPACITIES,
    FIG9_TOOL_AGENT,
    hour_slice,
    infinite_hit_rate,
)
from tiered_kv.sim.workload.synth import AGENT, PRESETS, generate

__all__ = ["AGENT", "CURVE_CAPACITIES", "FIG9_TOOL_AGENT", "PRESETS", "generate", "hour_slice", "infinite_hit_rate"]
