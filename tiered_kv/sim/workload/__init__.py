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
    TARGETS,
    Target,
    calibration_report,
    hour_slice,
    infinite_hit_rate,
    input_length_quantiles,
    markdown_table,
    one_hour_slice,
    real_trace_targets,
    requests_per_hour,
    reuse_time_quantiles,
    slice_stats,
    ttl_curves,
    ttl_hit_rates,
    ttl_loss,
)
from tiered_kv.sim.workload.synth import (
    AGENT,
    CHATBOT,
    DAY_S,
    HOUR_S,
    PRESETS,
    ClassConfig,
    SynthConfig,
    generate,
    get_config,
)

__all__ = [
    "CURVE_CAPACITIES", "FIG9_TOOL_AGENT", "hour_slice",
    "AGENT", "CHATBOT", "DAY_S", "HOUR_S", "PRESETS", "TARGETS", "ClassConfig", "SynthConfig", "Target",
    "calibration_report", "generate", "get_config", "infinite_hit_rate", "input_length_quantiles",
    "markdown_table", "one_hour_slice", "real_trace_targets", "requests_per_hour", "reuse_time_quantiles",
    "slice_stats", "ttl_curves", "ttl_hit_rates", "ttl_loss",
]
