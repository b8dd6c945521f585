"""Benchmarks behind ``tiered-kv bench NAME``.

Each module exposes ``NAME``, ``HELP``, ``register(parser)`` and ``run(args) -> dict``; the
dict is printed as JSON with ``--json`` and as a flat table otherwise. Benchmarks measure
their own baseline in the same run and report ratios against it; nothing here is a test.
"""
