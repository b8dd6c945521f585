"""What this process has used so far, as the kernel counts it (``getrusage``): memory and CPU time.

The simulator records the peak memory of each part of a generated day and of its replay, and the
benchmarks record it beside their timings, with the CPU time of what they time. Both read them
here, below both, so that a benchmark need not import a simulator module to learn what its own
process took.
"""

from __future__ import annotations


def peak_rss_bytes(children: bool = False) -> int:
    """Peak resident set of this process (or the largest of its finished children), in bytes."""
    import resource

    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    return int(resource.getrusage(who).ru_maxrss) * 1024  # Linux reports KiB


def cpu_seconds(children: bool = False) -> float:
    """User + system CPU seconds of this process, plus its finished children's with ``children``
    (a peer simulator's C++ binary runs as a child)."""
    import resource

    whos = (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) if children else (resource.RUSAGE_SELF,)
    return sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, whos))
