"""Test set-up shared by the whole suite.

Without a CUDA device, TRITON_INTERPRET=1 is set here, before any kernel module is imported,
so the Triton kernels themselves run (slowly, on small tensors) on the CPU in CI.
"""

import os


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


if "TRITON_INTERPRET" not in os.environ and not _cuda_available():
    os.environ["TRITON_INTERPRET"] = "1"


# CI runs the same hypothesis examples every time (a failure there is reproducible and main
# never turns red by the draw); locally examples stay random so new cases keep being explored.
try:
    from hypothesis import settings as _hyp_settings

    _hyp_settings.register_profile("ci", derandomize=True, print_blob=True)
    if os.environ.get("CI"):
        _hyp_settings.load_profile("ci")
except ImportError:  # hypothesis is in the dev extra
    pass


def runs_engines(notebook) -> bool:
    """A notebook that starts vLLM engines (it imports the connectors): test_notebooks runs it
    first (it is the longest), test_browser leaves it out (it draws nothing)."""
    return "tiered_kv.connectors" in notebook.read_text()
