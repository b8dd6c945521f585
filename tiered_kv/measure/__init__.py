"""Measurements that the benchmarks and the figures share.

A benchmark (``tiered_kv.bench``) records a measurement as JSON and renders its page; a figure
(``tiered_kv.viz``) may take the same measurement live or read the recorded JSON. What both need
sits here, below both, so neither imports the other: the TTFT of real prefills through the engine
(:mod:`.ttft`), the recompute-vs-load crossover read from its record (:mod:`.crossover`), and
tail latency when restores and misses contend for one store link (:mod:`.contention`).
"""
