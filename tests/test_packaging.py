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
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"] + project["optional-dependencies"]["dev"]  # e.g. obstore, moto[server]
    env = (ROOT / "environment.yml").read_text()
    pip_section = env.split("- pip:", 1)[1]
    pip_lines = [ln.strip()[2:] for ln in pip_section.splitlines() if ln.strip().startswith("- ")]
    pip_reqs = [ln for ln in pip_lines if not ln.startswith("-e")]
    assert sorted(pip_reqs) == sorted(deps), "environment.yml drifted from pyproject.toml (dependencies + dev)"
    assert "-e .[dev]" in env


def test_every_package_folder_is_listed_for_a_regular_install():
    """An editable install finds subpackages by path, so a folder missing from pyproject's list
    only breaks `pip install .` (a wheel without it): compare the list with the folders."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "tiered_kv").rglob("__init__.py")}
    assert set(tool["packages"]) == folders | {"tiered_kv.kernels"}
    assert tool["package-dir"]["tiered_kv.kernels"] == "kernels" and (ROOT / "kernels" / "__init__.py").is_file()


def test_kernels_is_a_subpackage_only():
    assert importlib.util.find_spec("tiered_kv.kernels") is not None
    # No top-level `kernels` module may be importable from the installed package.
    proc = subprocess.run([sys.executable, "-c", "import kernels"], capture_output=True, cwd="/")
    assert proc.returncode != 0


def _tracked_notebooks(root: Path = ROOT) -> dict[str, str]:
    """The notebooks as git holds them (the index: what the next commit records), by path.

    A working file that JupyterLab saved with outputs is the user's business; what is
    committed must be clean. Outside a git checkout (an sdist), the files themselves.
    """
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", "notebooks/*.ipynb"], cwd=root,
                                capture_output=True, check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        return {p.relative_to(root).as_posix(): p.read_text() for p in sorted((root / "notebooks").glob("*.ipynb"))}
    return {path: subprocess.run(["git", "show", f":{path}"], cwd=root, capture_output=True, check=True).stdout.decode()
            for path in listed if path}


def _problems(tracked: dict[str, str]) -> list[str]:
    from tiered_kv.viz.notebooks import dirty_cells

    out = []
    for path, text in tracked.items():
        nb = json.loads(text)
        if dirty_cells(nb):
            out.append(f"{path} is committed with outputs or execution counts in cells {dirty_cells(nb)}")
        if "widgets" in nb.get("metadata", {}):
            out.append(f"{path} is committed with saved widget state")
    return out


def test_committed_notebooks_have_no_outputs():
    tracked = _tracked_notebooks()
    assert len(tracked) >= 8
    assert not _problems(tracked)


def test_the_check_reads_what_git_tracks_not_the_working_file(tmp_path):
    """`make test` after `make lab`: the working file has outputs, what git tracks does not."""
    git = lambda *a: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=tmp_path,
                                    capture_output=True, check=True)
    (tmp_path / "notebooks").mkdir()
    nb = json.loads((ROOT / "notebooks" / "00_tour.ipynb").read_text())
    path = tmp_path / "notebooks" / "00_tour.ipynb"
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    git("init", "-q")
    git("add", "notebooks")
    git("commit", "-q", "-m", "clean")
    nb["cells"][1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["ran\n"]}]
    nb["cells"][1]["execution_count"] = 1
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")  # what an autosave leaves
    assert not _problems(_tracked_notebooks(tmp_path))
    git("add", "notebooks")  # staged, it would be committed: now it counts
    assert _problems(_tracked_notebooks(tmp_path)) == ["notebooks/00_tour.ipynb is committed with outputs or "
                                                       "execution counts in cells [1]"]


def test_make_lab_saves_notebooks_without_outputs(tmp_path):
    """The config `make lab` uses, loaded the way jupyter_server loads it, strips on save."""
    from jupyter_server.services.contents.filemanager import FileContentsManager
    from traitlets.config.loader import PyFileConfigLoader

    makefile = (ROOT / "Makefile").read_text()
    lab = makefile.split("\nlab:", 1)[1].split("\n\n", 1)[0]
    assert "JUPYTER_CONFIG_PATH=$(CURDIR)/scripts/jupyter" in lab
    cfg = PyFileConfigLoader("jupyter_server_config.py", path=str(ROOT / "scripts" / "jupyter")).load_config()
    cm = FileContentsManager(config=cfg, root_dir=str(tmp_path))
    nb = json.loads((ROOT / "notebooks" / "02_fp4.ipynb").read_text())
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    code["outputs"] = [{"output_type": "execute_result", "execution_count": 3, "metadata": {},
                        "data": {"text/plain": ["'small'"]}}]
    code["execution_count"] = 3
    code["metadata"]["execution"] = {"iopub.status.idle": "2026-01-01T00:00:00Z"}
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    cm.save({"type": "notebook", "format": "json", "content": nb}, "run.ipynb")
    saved = json.loads((tmp_path / "run.ipynb").read_text())
    from tiered_kv.viz.notebooks import dirty_cells

    assert dirty_cells(saved) == [] and "widgets" not in saved["metadata"]
    assert all("execution" not in c["metadata"] for c in saved["cells"])
    assert [c["source"] for c in saved["cells"]] == [c["source"] for c in nb["cells"]]
