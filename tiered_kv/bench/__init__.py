"""Benchmarks behind ``tiered-kv bench NAME``, and the records they own.

Each benchmark module exposes ``NAME``, ``HELP``, ``register(parser)`` and ``run(args) -> dict``;
the dict is printed as JSON with ``--json`` and as a flat table otherwise. Benchmarks measure
their own baseline in the same run and report ratios against it; nothing here is a test.

A benchmark also owns its record: ``PAGES`` (its section of BENCHMARKS.md, rendered from its
JSON alone) and ``SUMMARY`` (its line of the summary table against its goal), with the shared
rendering helpers in :mod:`._pages`. ``tiered-kv bench record NAME run.json`` (:mod:`.record`)
stores the JSON under ``benchmarks/results/`` and rewrites the page and BENCHMARKS.md. What a
figure also needs to measure lives below both, in :mod:`tiered_kv.measure`; a benchmark of a
figure's own widget lives beside it (``tiered_kv.commands.bench.BESIDE``), so this package and
``tiered_kv.viz`` do not import each other.
"""
