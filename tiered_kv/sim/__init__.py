"""Trace-driven simulation of the tiered KV cache, one subpackage per idea.

In import order, each part using only those before it (``tests/test_import_graph.py``):
:mod:`.heap` (the numba min-heap the kernels share), :mod:`.traces` (read and validate a trace once),
:mod:`.workload` (synthetic multi-day traffic and its calibration), :mod:`.trace_replay` (the compiled trace and the one replay engine),
:mod:`.trace_cache` (that compiled trace kept on disk between runs), :mod:`.policies` (the
registry, the policy families and the zoo), :mod:`.curves` (every capacity or TTL
in one pass), :mod:`.peers` (the public simulators' rules, policies and files),
:mod:`.cluster` (machines, tiers, routing, latency and cost) and :mod:`.retention` (byte-days,
the oracle frontier, the best TTLs); beside them :mod:`.sweep` (grids of cluster-model runs)
and :mod:`.day` (a DeepSeek-scale day drawn in shards and streamed). The simulator imports nothing of the model, the tiers or
the widgets.
"""
