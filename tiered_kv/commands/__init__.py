"""Subcommands of the ``tiered-kv`` CLI.

Each module here exposes ``NAME`` (the subcommand), ``HELP`` (one line), ``register(parser)``
(adds its arguments to an ``argparse`` parser) and ``run(args) -> int``. ``tiered_kv.cli``
discovers them, so adding a command never means editing a central list. Heavy imports
(torch, polars, zarr) belong inside ``run`` so that ``tiered-kv --help`` stays fast.
"""
