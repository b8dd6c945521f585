"""Record a benchmark run: ``benchmarks/results/NAME.{json,md}``, then BENCHMARKS.md.

    tiered-kv bench kernels --json > /tmp/kernels.json
    tiered-kv bench record kernels /tmp/kernels.json --machine "quiet, 2 cores"
    tiered-kv bench record all            # re-render every page from the committed JSONs

The JSON is copied to ``benchmarks/results/NAME.json`` with a ``recorded`` entry (the command
that wrote it, as ``bench NAME --json`` records it there, and, given ``--machine``, a note on the machine: :func:`._pages.recorded` says what
a page shows without one), and the page ``NAME.md`` is rendered from that JSON alone by the
benchmark's own module (its ``PAGES``), so the page can always be re-rendered and nothing in it
is typed. Then ``benchmarks/SUMMARY.md`` (every benchmark's line against its goal)
is rendered from all the JSONs and BENCHMARKS.md assembled: the summary, then every
``benchmarks/results/*.md`` with its headings one level down. Without a JSON file, NAME's
committed JSON is re-rendered (a ``--command`` or ``--machine`` given replaces what it recorded).
A name that only feeds another page (``policies_peers`` feeds ``policies``) re-renders that page.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from tiered_kv.bench import _summary
from tiered_kv.bench._pages import Page

NAME = "record"
HELP = "write benchmarks/results/NAME.{json,md} from a benchmark's JSON and reassemble BENCHMARKS.md"

#: The checkout this package sits in (the results live beside the code they measure).
ROOT = Path(__file__).resolve().parents[2]


def pages() -> dict[str, Page]:
    """Every page by name, from the modules that render them."""
    return {p.name: p for module in _summary.modules() for p in module.PAGES}


def names() -> list[str]:
    """What ``record`` accepts: every page and every JSON that feeds one."""
    return sorted({n for p in pages().values() for n in (p.name, *p.extra)})


def owner(name: str) -> Page:
    """The page ``name`` is, or the page it feeds."""
    every = pages()
    page = every.get(name) or next((p for p in every.values() if name in p.extra), None)
    if page is None:
        raise ValueError(f"NAME: unknown record {name!r}; choose from {', '.join(names())} or all")
    return page


def _read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def render(page: Page, results: Path, replace: dict[str, dict] | None = None) -> str:
    """The text of ``page`` from the JSONs under ``results`` (``replace``: JSONs not yet written)."""
    replace = replace or {}
    data = {n: replace[n] if n in replace else _read(results / f"{n}.json") for n in (page.name, *page.extra)}
    where = results / f"{page.name}.json"
    if data[page.name] is None:
        raise ValueError(f"{where}: no such record (run the benchmark with --json first)")
    try:
        return page.render(*data.values())
    except (KeyError, TypeError, IndexError, ValueError) as e:
        raise ValueError(f"{where}: not the JSON this page is rendered from (missing or malformed entry {e})") from e


def prepared(name: str, src: Path | None, results: Path, command: str | None, machine: str | None) -> dict:
    """The JSON of ``src`` (or the one recorded) with its ``recorded`` entry: command and machine."""
    path = Path(src) if src else results / f"{name}.json"
    try:
        r = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"JSON: cannot read the benchmark JSON {path}: {e}") from e
    if not isinstance(r, dict):
        raise ValueError(f"JSON: {path} holds no JSON object")
    rec = dict(r.get("recorded") or {})
    rec["command"] = command or rec.get("command") or owner(name).command
    if machine is not None:  # the page writes "Machine:" before the note: a note typed with it loses its own
        rec["machine"] = machine.removeprefix("Machine:").strip()
    return {**r, "recorded": rec}


def record(name: str, results: Path, src: Path | None = None, command: str | None = None,
           machine: str | None = None) -> Path:
    """Store ``name``'s JSON (checked by rendering its page first, so a bad one writes nothing)
    and write the page it makes."""
    page = owner(name)
    if src is not None or command is not None or machine is not None:
        r = prepared(name, src, results, command, machine)
        render(page, results, {name: r})
        results.mkdir(parents=True, exist_ok=True)
        (results / f"{name}.json").write_text(json.dumps(r, indent=1) + "\n")
    out = results / f"{page.name}.md"
    out.write_text(render(page, results))
    return out


def assemble(root: Path) -> Path:
    """benchmarks/SUMMARY.md from the JSONs, then BENCHMARKS.md = the summary + every page."""
    results = root / "benchmarks" / "results"
    summary = _summary.render(results)
    (root / "benchmarks" / "SUMMARY.md").write_text(summary)
    parts = [summary]
    for md in sorted(results.glob("*.md")):  # each page a section: its headings one level down
        parts.append("\n---\n\n" + re.sub(r"(?m)^#", "##", md.read_text()))
    out = root / "BENCHMARKS.md"
    out.write_text("".join(parts))
    return out


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", choices=[*names(), "all"],
                        help="the record: " + ", ".join(names()) + "; or all (every committed JSON)")
    parser.add_argument("src", metavar="JSON", nargs="?", default=None,
                        help="the benchmark's --json output (default: re-render the committed one)")
    parser.add_argument("--command", dest="run_command", default=None,
                        help="the command that wrote the JSON (default: the usual one)")
    parser.add_argument("--machine", default=None, help="a note on the machine and its load during the run")
    parser.add_argument("--root", default=str(ROOT), help="the checkout to write into (default: this one)")


def run(args: argparse.Namespace) -> dict:
    root = Path(args.root)
    results = root / "benchmarks" / "results"
    if args.name == "all":
        if args.src or args.run_command or args.machine is not None:
            raise ValueError("NAME all: re-renders the committed JSONs; give no JSON, --command or --machine")
        written = [record(p.name, results) for p in pages().values() if (results / f"{p.name}.json").exists()]
    else:
        written = [record(args.name, results, args.src, args.run_command, args.machine)]
    return {"wrote": [str(p) for p in written], "assembled": str(assemble(root))}
