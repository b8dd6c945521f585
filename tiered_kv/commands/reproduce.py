"""Regenerate every figure into figures/ (SVG and PNG) and write figures/REPORT.md.

Each figure is computed by the package from the model, the simulator or a measurement on
this machine; REPORT.md sets every published number beside the reproduced one, with the
inputs used and the difference. ``--quick`` uses small sizes (for CI).

Each figure gets its own progress bar, sized by that figure's last build time at the same size
(kept in its saved section), so a long figure shows how far along it is rather than a frozen
line. Figures are built in separate processes, ``--jobs N`` of them at once, the longest first:
figures are independent, and most of them use one core.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time
from pathlib import Path

NAME = "reproduce"
HELP = "regenerate all figures and figures/REPORT.md (published vs reproduced numbers)"


def register(parser: argparse.ArgumentParser) -> None:
    from tiered_kv import cli_args as _args

    parser.add_argument("--quick", action="store_true", help="small sizes (CI)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: figures/)")
    parser.add_argument("--only", nargs="*", default=None, metavar="NAME",
                        help="build only figures whose name contains one of these strings; the "
                             "other figures' saved sections stay in REPORT.md")
    parser.add_argument("--jobs", type=_args.int_at_least(1, "figures built at once"), default=default_jobs(),
                        metavar="N", help="figures built at once, each in its own process (default: half the "
                                          f"CPU cores, here {default_jobs()})")


def default_jobs() -> int:
    """Half the cores: the model figures run torch on two threads, the others one core each."""
    return max(1, (os.cpu_count() or 1) // 2)


def run(args: argparse.Namespace) -> int:
    from tiered_kv import FIGURES_DIR
    from tiered_kv.viz.figures import modules

    out: Path = args.out or FIGURES_DIR
    out.mkdir(parents=True, exist_ok=True)
    every = modules()
    mods = [m for m in every if not args.only or any(s in m.NAME for s in args.only)]
    if not mods:
        names = ", ".join(m.NAME for m in every)
        raise SystemExit(f"reproduce --only: no figure name contains {' or '.join(args.only)!r}; "
                         f"figures: {names}")
    mode = "quick" if args.quick else "full"
    expected = {m.NAME: last_build_s(out, m.NAME, mode) for m in mods}
    t0 = time.perf_counter()
    _build(mods, out, args.quick, expected, args.jobs)
    write_report(out, every, mode)
    print(f"wrote {len(mods)} figures and {out / 'REPORT.md'} in {time.perf_counter() - t0:.0f} s")
    return 0


def build_figure(module_name: str, out: Path, quick: bool) -> float:
    """Build one figure, save its SVG, PNG and REPORT section; its build seconds."""
    m = importlib.import_module(module_name)
    t0 = time.perf_counter()
    result = m.build(quick=quick)
    result.chart.save(str(out / f"{m.NAME}.svg"))
    result.chart.save(str(out / f"{m.NAME}.png"), scale_factor=1.5)
    elapsed = time.perf_counter() - t0
    save_section(out, m, result, "quick" if quick else "full", elapsed)
    return elapsed


def last_build_s(out: Path, name: str, mode: str) -> float | None:
    """The figure's build seconds from its saved section at ``mode`` size, or None."""
    try:
        rec = json.loads((out / SECTIONS / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None
    return float(rec["built_s"]) if rec.get("mode") == mode and rec.get("built_s") else None


class FigureBar:
    """One figure's progress bar: seconds elapsed against its last build time, ticked while the
    build runs in another process.

    Why time: a figure's build is one call into the package, which reports no steps of its own;
    its last build at the same size is the best estimate there is of how long it takes. A bar
    without an estimate (first build) counts seconds.
    """

    def __init__(self, name: str, expected_s: float | None) -> None:
        from tqdm.auto import tqdm

        self.t0 = time.perf_counter()
        self.name = name
        total = round(expected_s, 1) if expected_s else None
        self.bar = tqdm(total=total, desc=name, unit="s", leave=True, disable=None,  # off when not a terminal
                        bar_format="{desc:<28} {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s (last build)"
                        if total else "{desc:<28} {n:.0f} s (first build)")

    def tick(self) -> None:
        elapsed = time.perf_counter() - self.t0
        self.bar.n = min(elapsed, self.bar.total * 0.99) if self.bar.total else elapsed
        self.bar.refresh()

    def finish(self, failed: bool = False) -> None:
        elapsed = time.perf_counter() - self.t0
        if self.bar.total:
            self.bar.total = max(self.bar.total, round(elapsed, 1))
        self.bar.n = elapsed
        self.bar.refresh()
        self.bar.close()
        if self.bar.disable:  # a log, not a terminal: one line per figure instead of a bar
            print(f"{self.name:<28} {'failed after' if failed else 'built in'} {elapsed:.1f} s", flush=True)


def _build(mods, out: Path, quick: bool, expected: dict, jobs: int) -> None:
    """Build ``mods`` in ``jobs`` processes, the longest (by last build) first, one bar each.

    A figure is submitted only when a worker is free: the pool marks a queued call as running
    before a worker takes it, so a bar opened at submission would count its figure's wait.
    """
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    todo = sorted(mods, key=lambda m: -(expected[m.NAME] or 0.0))
    pending: dict = {}  # future -> the figure's bar
    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
        try:
            while todo or pending:
                while todo and len(pending) < jobs:
                    m = todo.pop(0)
                    pending[pool.submit(build_figure, m.__name__, out, quick)] = FigureBar(m.NAME, expected[m.NAME])
                done, _ = wait(list(pending), timeout=0.5, return_when=FIRST_COMPLETED)
                for bar in pending.values():
                    bar.tick()
                for f in done:
                    pending.pop(f).finish(failed=f.exception() is not None)
                    f.result()  # a figure that failed stops the build with its own error
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            for bar in pending.values():
                bar.bar.close()
            raise


SECTIONS = "sections"  #: sub-folder of the output holding one built section per figure (JSON)


def save_section(out: Path, module, result, mode: str, elapsed: float) -> None:
    """Keep one figure's REPORT section and claims, so a later ``--only`` run leaves it in REPORT.

    Why: the full build is the longest command, and a figure whose inputs changed (a new
    checkpoint, say) should be rebuilt alone without dropping the other figures' sections.
    The file is written to a temporary name and renamed, so a killed build leaves the old one.
    """
    from tiered_kv.viz.report import claims_table

    body = [f"## {module.NAME}: {module.TITLE}", "", f"![{module.TITLE}]({module.NAME}.png)", ""]
    if result.notes:
        body += [result.notes, ""]
    if result.claims:
        body += [claims_table(result.claims), ""]
    body.append(f"_Built in {elapsed:.1f} s ({mode} size)._")
    folder = out / SECTIONS
    folder.mkdir(exist_ok=True)
    record = {"name": module.NAME, "title": module.TITLE, "mode": mode, "built_s": elapsed,
              "section": "\n".join(body), "claims": [c.to_dict() for c in result.claims]}
    tmp = folder / f"{module.NAME}.json.tmp"
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(folder / f"{module.NAME}.json")


def write_report(out: Path, modules, mode: str) -> None:
    """REPORT.md and claims.json from every saved section of a current figure module.

    A section built at another size than ``mode`` (quick among full, or the reverse) is named
    in the header; a figure never built is listed as missing. Sections of figures that no
    longer exist are ignored.
    """
    from tiered_kv.viz.report import Claim, claims_table

    sections, all_claims, other_mode, missing = [], [], [], []
    for m in modules:
        f = out / SECTIONS / f"{m.NAME}.json"
        if not f.is_file():
            missing.append(m.NAME)
            continue
        rec = json.loads(f.read_text())
        if rec["mode"] != mode:
            other_mode.append(f"{m.NAME} ({rec['mode']})")
        sections.append(rec["section"])
        all_claims.extend(Claim.from_dict(c) for c in rec["claims"])
    state = ""
    if other_mode:
        state += f"**Built at another size:** {', '.join(other_mode)}. "
    if missing:
        state += f"**Not built yet:** {', '.join(missing)} (run `tiered-kv reproduce`). "
    header = [
        "# tiered-kv: reproduced figures and published claims",
        "",
        f"Generated by `tiered-kv reproduce{' --quick' if mode == 'quick' else ''}` ({mode} size; "
        "a figure can be rebuilt alone with `--only NAME`, which keeps every other section). " + state
        +
        "Every reproduced value below is computed by the package. The kind of each row: "
        "'reproduction' (computed from inputs not tuned on this number), 'calibration' (a default "
        "was tuned on this number, so it is not an independent reproduction), 'check' (arithmetic "
        "on a published number typed in as an input), 'proxy' (a different quantity set beside the "
        "published one). `claims.json` beside this file gives each row's provenance: the public "
        "function and inputs that produce it.",
        "",
        "## All claims",
        "",
        claims_table(all_claims) if all_claims else "_No claims yet._",
        "",
    ]
    (out / "REPORT.md").write_text("\n".join(header) + "\n" + "\n\n".join(sections) + "\n")
    (out / "claims.json").write_text(json.dumps([c.to_dict() for c in all_claims], indent=1) + "\n")
