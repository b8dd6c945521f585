"""What a newcomer reads: the README's first screen, help texts and the report point only at
things this repository has."""

from __future__ import annotations

import contextlib
import importlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Names of documents a user of this repository does not have.
MISSING_DOCS = re.compile(r"DESIGN\.md|\bissue #?\d+\b", re.IGNORECASE)
#: Files of the repository a text may cite as reading (documents, modules, scripts, notebooks);
#: output folders a command writes (data/day, figures/) are not citations.
CITED_PATH = re.compile(r"\b((?:docs|tiered_kv|kernels|scripts|benchmarks|notebooks)/[\w./-]*\.(?:md|py|ipynb|sh))\b")


def test_readme_first_screen_says_how_to_reach_the_cli():
    first = "\n".join((ROOT / "README.md").read_text().splitlines()[:40])
    assert "make run" in first
    for way in (".venv/bin/tiered-kv", "source .venv/bin/activate", "make shell"):
        assert way in first, f"the README's first screen does not mention {way}"
    assert "TIERED_KV_QUICK" in first
    makefile = (ROOT / "Makefile").read_text()
    assert "\nshell:" in makefile and "$(BIN):$$PATH" in makefile


def _help_texts() -> dict[str, str]:
    from tiered_kv.cli import main

    out = {}
    names = [["--help"]]
    from tiered_kv import commands

    for info in sorted(Path(commands.__file__).parent.glob("[a-z]*.py")):
        names.append([info.stem, "--help"])
    from tiered_kv import bench
    from tiered_kv.cli_args import discover
    from tiered_kv.commands.bench import BESIDE

    beside = [importlib.import_module(name) for name in BESIDE]
    names += [["bench", m.NAME, "--help"] for m in [*discover(bench), *beside]]
    for argv in names:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
            main(argv)
        out[" ".join(argv)] = buf.getvalue()
    return out


def test_help_texts_cite_only_files_that_exist():
    texts = _help_texts()
    assert len(texts) >= 8 and all(texts.values())
    for cmd, text in texts.items():
        assert not MISSING_DOCS.search(text), f"`tiered-kv {cmd}` refers to {MISSING_DOCS.search(text).group()}"
        for path in CITED_PATH.findall(text):
            if re.search(r"(^|/)[A-Z_]{3,}(\.|/|$)", path):  # a placeholder, e.g. data/checkpoints/PRESET.pt
                continue
            assert (ROOT / path).exists() or (ROOT / path).with_suffix(".py").exists(), \
                f"`tiered-kv {cmd}` cites {path}, which does not exist"


@pytest.mark.parametrize("path", ["figures/REPORT.md", "README.md", "docs/semantics.md", "docs/peers.md"])
def test_documents_do_not_cite_missing_documents(path):
    text = (ROOT / path).read_text()
    assert not MISSING_DOCS.search(text), f"{path} refers to {MISSING_DOCS.search(text).group()}"


def test_figure_notes_do_not_cite_missing_documents():
    for module in sorted((ROOT / "tiered_kv" / "viz" / "figures").glob("[0-9]*.py")):
        found = MISSING_DOCS.search(module.read_text())
        assert not found, f"{module.name} writes {found.group()} into REPORT.md"


def test_semantics_doc_exists_where_the_help_points():
    text = (ROOT / "docs" / "semantics.md").read_text()
    for rule in ("timestamp order", "min(p * block_size, L)", "floor(C / block_size)"):
        assert rule in text


def test_readme_make_run_times_are_the_committed_reports():
    """The README's `make run` line quotes figure build times; they must be the ones REPORT.md and
    figures/sections carry (rounded to the second), and the total at least their sum."""
    import json

    readme = (ROOT / "README.md").read_text()
    m = re.search(r"`make run` took (\d+) s for all (\d+) figures.*?build time \(((?:\d+: \d+ s, )*\d+: \d+ s)\)",
                  readme, re.S)
    assert m, "the README's `make run` line no longer says its time and figure build times"
    sections = {p.stem[:2]: json.loads(p.read_text())["built_s"] for p in (ROOT / "figures" / "sections").glob("*.json")}
    assert int(m[2]) == len(sections)
    for fig, seconds in re.findall(r"(\d+): (\d+) s", m[3]):
        assert int(seconds) == round(sections[fig]), (fig, seconds, sections[fig])
    assert int(m[1]) >= int(sum(sections.values()))
