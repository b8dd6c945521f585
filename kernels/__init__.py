"""Triton kernels, each beside its plain-torch reference.

Installed as ``tiered_kv.kernels`` (never as a top-level ``kernels`` module, a name that
belongs to another PyPI package). On CPU the torch references (for large FP4 tensors, the numba
loops of ``fp4_cpu``) are the default path; under ``TRITON_INTERPRET=1`` the Triton kernels
themselves run on the CPU for testing.
"""

from __future__ import annotations

import os

try:  # triton is optional: absent on macOS / Windows, where the torch references run
    import triton
except ImportError:  # pragma: no cover - exercised only without triton
    triton = None


def interpreting() -> bool:
    """Whether Triton runs its interpreter on the CPU (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def resolve_backend(backend: str, allowed: tuple[str, ...], device, cpu: str = "torch") -> str:
    """The concrete backend: ``"auto"`` is Triton on CUDA (the torch reference without triton)
    and ``cpu`` elsewhere; ``"triton"`` needs the package and a CUDA tensor or the interpreter."""
    if backend not in allowed:
        raise ValueError(f"unknown backend {backend!r}; allowed: {', '.join(allowed)}")
    if backend == "auto":
        return ("triton" if triton is not None else "torch") if device.type == "cuda" else cpu
    if backend == "triton":
        if triton is None:
            raise ValueError("backend='triton' needs the triton package, which is not installed")
        if device.type != "cuda" and not interpreting():
            raise ValueError(f"backend='triton' needs CUDA tensors (got {device.type}); on the CPU set "
                             "TRITON_INTERPRET=1 before importing tiered_kv.kernels, or use backend='torch'")
    return backend
