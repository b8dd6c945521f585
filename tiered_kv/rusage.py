"""What this process has used so far, as the kernel counts it (``getrusage``).

The simulator records the peak memory of each part of a generated day and of its replay, and the
benchmarks record it beside their timings. Both read it here, below both, so that a benchmark
need not import a simulator module to learn how much memory its own process took.
"""

from __future__ import annotations


def peak_rss_bytes(children: bool = False) -> int:
    """Peak resident set of this process (or the largest of its finished children), in bytes."""
    import resource

    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    return int(resource.getrusage(who).ru_maxrss) * 1024  # Linux reports KiB
