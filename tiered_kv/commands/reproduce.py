"""Regenerate every figure into figures/ (SVG and PNG) and write figures/REPORT.md.

Each figure is computed by the package from the model, the simulator or a measurement on
this machine; REPORT.md sets every published number beside the reproduced one, with the
inputs used and the difference. ``--quick`` uses small sizes (for CI, under two minutes).
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import time
from pathlib import Path

NAME = "reproduce"
HELP = "regenerate all figures and figures/REPORT.md (published vs reproduced numbers)"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="small sizes (CI); under 2 minutes")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: figures/)")
    parser.add_argument("--only", nargs="*", default=None, metavar="NAME",
                        help="build only figures whose name contains one of these strings; the "
                             "other figures' saved sections stay in REPORT.md")


def figure_modules():
    import tiered_kv.viz.figures as pkg

    mods = []
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("_"):
            continue
        m = importlib.import_module(f"{pkg.__name__}.{info.name}")
        if hasattr(m, "build") and hasattr(m, "NAME"):
            mods.append(m)
    return sorted(mods, key=lambda m: m.NAME)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from tiered_kv import FIGURES_DIR

    out: Path = args.out or FIGURES_DIR
    out.mkdir(parents=True, exist_ok=True)
    every = figure_modules()
    mods = every
    if args.only:
        mods = [m for m in mods if any(s in m.NAME for s in args.only)]
        if not mods:
            names = ", ".join(m.NAME for m in every)
            raise SystemExit(f"reproduce --only: no figure name contains {' or '.join(args.only)!r}; "
                             f"figures: {names}")
    mode = "quick" if args.quick else "full"
    for m in tqdm(mods, desc="figures", unit="fig"):
        t0 = time.perf_counter()
        result = m.build(quick=args.quick)
        result.chart.save(str(out / f"{m.NAME}.svg"))
        result.chart.save(str(out / f"{m.NAME}.png"), scale_factor=1.5)
        save_section(out, m, result, mode, time.perf_counter() - t0)
    write_report(out, every, mode)
    print(f"wrote {len(mods)} figures and {out / 'REPORT.md'}")
    return 0


SECTIONS = "sections"  #: sub-folder of the output holding one built section per figure (JSON)


def save_section(out: Path, module, result, mode: str, elapsed: float) -> None:
    """Keep one figure's REPORT section and claims, so a later ``--only`` run leaves it in REPORT.

    Why: the full build takes most of an hour, and a figure whose inputs changed (a new
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
    (out / "REPORT.md").write_text("\n".join(header + sections) + "\n")
    (out / "claims.json").write_text(json.dumps([c.to_dict() for c in all_claims], indent=1) + "\n")
