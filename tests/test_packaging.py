"""Set-up checks: one dependency list, kernels installed only as tiered_kv.kernels, clean notebooks."""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent


def _name(req: str) -> str:
    return re.split(r"[<>=!~;\[ ]", req.strip(), maxsplit=1)[0].lower()


def test_environment_yml_mirrors_pyproject():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    env = (ROOT / "environment.yml").read_text()
    pip_section = env.split("- pip:", 1)[1]
    pip_lines = [ln.strip()[2:] for ln in pip_section.splitlines() if ln.strip().startswith("- ")]
    pip_reqs = [ln for ln in pip_lines if not ln.startswith("-e")]
    assert sorted(pip_reqs) == sorted(deps), "environment.yml drifted from pyproject.toml"
    assert "-e .[dev]" in env


def test_kernels_is_a_subpackage_only():
    assert importlib.util.find_spec("tiered_kv.kernels") is not None
    # No top-level `kernels` module may be importable from the installed package.
    proc = subprocess.run([sys.executable, "-c", "import kernels"], capture_output=True, cwd="/")
    assert proc.returncode != 0


def test_committed_notebooks_have_no_outputs():
    for nb_path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = json.loads(nb_path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                assert not cell.get("outputs"), f"{nb_path.name} carries outputs"
                assert cell.get("execution_count") is None, f"{nb_path.name} carries execution counts"
