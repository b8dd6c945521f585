"""The package's import graph: no circles, and the simulator's folders say what they hold.

Imports are read from the source with ``ast`` (every ``import`` statement, module level or inside
a function, except those under ``if TYPE_CHECKING:``), so a lazy import that closes a circle
counts as much as a top-level one. ``kernels/`` is read as ``tiered_kv.kernels``, as installed.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"tiered_kv": ROOT / "tiered_kv", "tiered_kv.kernels": ROOT / "kernels"}

SIM_PACKAGES = ["traces", "workload", "policies", "peers", "cluster", "retention"]
#: Circles known to exist outside the simulator, left to their owners. The test fails on any
#: other circle, and on these once they are gone, so the list can only shrink. (The SSD tier's
#: ssd_io/ssd_layout/ssd_object circle is gone since 1207c0c; tiers/ssd/backend.py opens stores.)
KNOWN_CYCLES: list[list[str]] = []


def package_modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package ``__init__``) for every module of the installed tree."""
    out = {}
    for prefix, base in SOURCES.items():
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            out[".".join([prefix, *(parts[:-1] if is_pkg else parts)])] = (path, is_pkg)
    return out


def _type_checking_only(tree: ast.Module) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def imported_modules(name: str, path: Path, is_pkg: bool, known: set[str]) -> set[str]:
    """Modules of ``known`` that ``name`` imports (``from a import b`` counts ``a.b`` when it is one)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skip = _type_checking_only(tree)
    package = name if is_pkg else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.add(sub if sub in known else module)
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    mods = package_modules()
    return {name: imported_modules(name, path, is_pkg, set(mods)) for name, (path, is_pkg) in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_cycle_finder_sees_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    graph = import_graph()
    assert "tiered_kv.sim.policies.registry" in graph
    found = cycles(graph)
    new = [c for c in found if c not in KNOWN_CYCLES]
    assert not new, "import circles: " + "; ".join(" <-> ".join(c) for c in new)
    gone = [c for c in KNOWN_CYCLES if c not in found]
    assert not gone, f"no longer circles, remove them from KNOWN_CYCLES: {gone}"


#: The simulator's layers in the order the README draws them: each imports only earlier ones.
SIM_LAYERS = ["heap", "traces", "workload", "day", "trace_replay", "trace_cache", "policies", "curves", "peers", "cluster",
              "retention", "sweep"]


def test_sim_layers_import_only_the_layers_drawn_before_them():
    graph = import_graph()

    def layer(module: str) -> int | None:
        parts = module.split(".")
        name = parts[2] if len(parts) > 2 and parts[:2] == ["tiered_kv", "sim"] else None
        return SIM_LAYERS.index(name) if name in SIM_LAYERS else None

    for name, deps in graph.items():
        own = layer(name)
        if own is None:  # tiered_kv.sim itself
            continue
        for dep in deps:
            other = layer(dep)
            assert other is None or other <= own, f"{name} ({SIM_LAYERS[own]}) imports {dep} ({SIM_LAYERS[other]})"


def test_policy_registry_imports_no_policy():
    graph = import_graph()
    below = graph["tiered_kv.sim.policies.registry"]
    assert not any(m.startswith(("tiered_kv.sim.policies.", "tiered_kv.sim.peers")) for m in below), below


def test_simulator_imports_no_widgets_and_no_model():
    graph = import_graph()
    for name, deps in graph.items():
        if name.startswith("tiered_kv.sim"):
            bad = {d for d in deps if d.startswith(("tiered_kv.viz", "tiered_kv.commands", "tiered_kv.bench",
                                                     "tiered_kv.model", "tiered_kv.tiers", "tiered_kv.kernels"))}
            assert not bad, f"{name} imports {bad}"


@pytest.mark.parametrize("name", SIM_PACKAGES)
def test_sim_subpackage_says_what_it_holds_and_may_import(name):
    module = importlib.import_module(f"tiered_kv.sim.{name}")
    doc = module.__doc__ or ""
    assert len(doc.split()) >= 40 and "may import" in doc, f"tiered_kv.sim.{name}: docstring too thin"
    for public in getattr(module, "__all__", []):
        assert hasattr(module, public), f"tiered_kv.sim.{name}.__all__ names a missing {public}"


def test_new_paths_import_without_deprecation_warnings():
    names = ", ".join(f"tiered_kv.sim.{n}" for n in SIM_PACKAGES + ["trace_replay", "curves"])
    proc = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", f"import {names}"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr


#: Imports made by name at run time, which the ``ast`` scan above cannot see, each with why it
#: may point against the layers: the registry loads the trie policies (shipped in ``peers``,
#: above it) the first time a name is not found, so every registered name is listed.
BY_NAME = {"tiered_kv.sim.policies.registry": {"tiered_kv.sim.peers.trie_policies"}}


def test_the_registrys_by_name_loads_are_the_declared_ones_and_exist():
    from tiered_kv.sim.policies import registry

    assert set(registry._SHIPPED_ELSEWHERE) == BY_NAME["tiered_kv.sim.policies.registry"]
    for src, targets in BY_NAME.items():
        missing = {t for t in targets if importlib.util.find_spec(t) is None}
        assert not missing, f"{src} loads a module that does not exist: {missing}"
