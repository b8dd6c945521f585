"""Triton kernels, each beside its plain-torch reference.

Installed as ``tiered_kv.kernels`` (never as a top-level ``kernels`` module, a name that
belongs to another PyPI package). On CPU the torch references are the default path; under
``TRITON_INTERPRET=1`` the Triton kernels themselves run on the CPU for testing.
"""
