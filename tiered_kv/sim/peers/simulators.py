"""Run the public KV-cache simulators on a trace, and tiered-kv under their semantics.

Two peers are cross-checked (``tiered-kv bench peers``, ``tests/test_parity.py``):

- **kvcache.ai** ``kvcache-simulator`` (PyPI, Apache-2.0; the engine of kvcache.ai's web tool):
  ``lru``, ``fifo`` and ``optimal`` over a prefix trie, C++ (fastest) and Python backends. It
  reads Mooncake-style JSONL itself; here it is called through
  ``kvcache_sim.cpp_backend.run_cpp_sweep`` with block capacities, so no GiB-to-blocks model
  arithmetic gets between the two. tiered-kv matches it with ``--semantics kvcache-ai`` and the
  policies ``lru-trie``, ``belady-trie``, ``fifo-trie`` (:mod:`tiered_kv.sim.peers.trie_policies`).
- **LMCache**'s cache simulator (``lmcache.tools.cache_simulator`` in the ``lmcache`` wheel):
  plain LRU over chunk hashes, read from lookup-hash JSONL. The package's top-level
  ``__init__`` needs torch and CUDA, so only the simulator subpackage (pure Python plus
  ``sortedcontainers``) is loaded (:func:`lmcache_simulator`). tiered-kv matches it with
  ``--semantics lmcache`` and plain ``lru``.

Nothing here installs anything: when a peer is missing, :func:`kvcache_status` /
:func:`lmcache_status` say so and how to get it.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # only annotations here: the frames come from the callers
    import polars as pl

from tiered_kv import REPO_ROOT

INSTALL_HINT = "pip install -e '.[peers]' && scripts/fetch_peers.sh"
KVCACHE_POLICIES = {"lru": "lru-trie", "optimal": "belady-trie", "fifo": "fifo-trie"}


@dataclass(frozen=True)
class PeerStatus:
    """Whether a peer can run here, its version, and why not."""

    name: str
    available: bool
    version: str | None
    detail: str

    def to_dict(self) -> dict:
        return {"name": self.name, "available": self.available, "version": self.version, "detail": self.detail}


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _dist_version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


# --------------------------------------------------------------------------------------------
# kvcache.ai


def kvcache_status() -> PeerStatus:
    """Is ``kvcache-simulator`` importable (and which backend will run)?"""
    if not _importable("kvcache_sim"):
        return PeerStatus("kvcache-simulator", False, None, f"not installed ({INSTALL_HINT})")
    backend = "cpp" if shutil.which("c++") else "python"
    return PeerStatus("kvcache-simulator", True, _dist_version("kvcache-simulator"), f"backend {backend}")


def write_kvcache_jsonl(df: pl.DataFrame, path: str | Path) -> Path:
    """A trace frame as the JSONL kvcache-simulator reads, in file (``request_id``) order."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as fh:
        for length, bs, ids in df.sort("request_id").select("input_length", "block_size", "block_ids").iter_rows():
            fh.write(json.dumps({"input_length": int(length), "block_size": int(bs),
                                 "hash_ids": [int(h) for h in ids]}) + "\n")
    return path


def kvcache_trace(path: str | Path, block_size: int | None = None):
    """The peer's own parse of a trace file (``block_size`` for files without the field)."""
    from kvcache_sim.trace import parse_trace_file

    return parse_trace_file(path, block_size=block_size)


def run_kvcache(trace, capacities_blocks, policy: str, *, warmup_fraction: float = 0.5,
                backend: str = "cpp") -> np.ndarray:
    """kvcache-simulator's hit tokens at each capacity (blocks); 0 where it reports underfilled."""
    from kvcache_sim.simulator import warmup_requests_for_trace

    if policy not in KVCACHE_POLICIES:
        raise ValueError(f"policy: must be one of {sorted(KVCACHE_POLICIES)}, got {policy!r}")
    caps = [int(c) for c in np.asarray(capacities_blocks).reshape(-1)]
    warmup = warmup_requests_for_trace(trace, warmup_fraction)
    if backend == "cpp":
        from kvcache_sim.cpp_backend import run_cpp_sweep

        positive = sorted({c for c in caps if c > 0})
        res = run_cpp_sweep(trace, capacities=positive, policies=[policy], warmup_requests=warmup).results
        return np.array([res[(policy, c)].hitTokens if c > 0 else 0 for c in caps], dtype=np.int64)
    if backend != "python":
        raise ValueError(f"backend: must be 'cpp' or 'python', got {backend!r}")
    from kvcache_sim.plan import build_execution_plan
    from kvcache_sim.policies import simulate_policy

    plan = build_execution_plan(trace, warmup_fraction=warmup_fraction)
    return np.array([simulate_policy(plan, policy, c).hitTokens for c in caps], dtype=np.int64)


def ours_kvcache(df: pl.DataFrame, capacities_blocks, policy: str) -> np.ndarray:
    """tiered-kv under ``--semantics kvcache-ai``: hit tokens at each capacity (blocks), one pass."""
    from tiered_kv.sim.peers.semantics import get_semantics
    from tiered_kv.sim.peers.trie import from_compiled
    from tiered_kv.sim.peers.trie_belady import optimal_trie_curve
    from tiered_kv.sim.peers.trie_fifo import fifo_trie_curve
    from tiered_kv.sim.peers.trie_lru import lru_trie_curve
    from tiered_kv.sim.trace_replay import compile_trace

    t = from_compiled(compile_trace(df, get_semantics("kvcache-ai").options))
    curve = {"lru": lru_trie_curve, "optimal": optimal_trie_curve, "fifo": fifo_trie_curve}[policy]
    return curve(t, capacities_blocks)


# --------------------------------------------------------------------------------------------
# LMCache


def peers_dir() -> Path:
    """Where ``scripts/fetch_peers.sh`` puts the lmcache wheel (``<venv>/peers``)."""
    return Path(sys.prefix) / "peers"


def _lmcache_wheel() -> Path | None:
    for d in (peers_dir(), REPO_ROOT / ".venv" / "peers"):
        wheels = sorted(d.glob("lmcache-*.whl")) if d.is_dir() else []
        if wheels:
            return wheels[-1]
    return None


def lmcache_status() -> PeerStatus:
    """Is LMCache's simulator importable, or its wheel downloaded?"""
    if "lmcache.tools.cache_simulator.simulator" in sys.modules:
        return PeerStatus("lmcache", True, _wheel_version(), "loaded")
    if not _importable("sortedcontainers"):
        return PeerStatus("lmcache", False, None, f"sortedcontainers not installed ({INSTALL_HINT})")
    wheel = _lmcache_wheel()
    if wheel is None:
        return PeerStatus("lmcache", False, None, f"no lmcache wheel in {peers_dir()} ({INSTALL_HINT})")
    return PeerStatus("lmcache", True, _wheel_version(), f"simulator extracted from {wheel.name}")


def _wheel_version() -> str | None:
    wheel = _lmcache_wheel()
    return wheel.name.split("-")[1] if wheel else _dist_version("lmcache")


def lmcache_simulator() -> ModuleType:
    """``lmcache.tools.cache_simulator.simulator``, imported without lmcache's own ``__init__``.

    Only ``lmcache/tools/cache_simulator/`` is extracted from the wheel, into a temporary
    folder, under empty ``lmcache`` and ``lmcache.tools`` packages; the folder is removed once
    the modules are loaded (they need nothing else from disk).
    """
    name = "lmcache.tools.cache_simulator.simulator"
    if name in sys.modules:
        return sys.modules[name]
    status = lmcache_status()
    if not status.available:
        raise FileNotFoundError(f"LMCache simulator unavailable: {status.detail}")
    wheel = _lmcache_wheel()
    tmp = Path(tempfile.mkdtemp(prefix="tiered-kv-lmcache-"))
    try:
        prefix = "lmcache/tools/cache_simulator/"
        with zipfile.ZipFile(wheel) as zf:
            for member in zf.namelist():
                if member.startswith(prefix) and member.endswith(".py"):
                    zf.extract(member, tmp)
        for pkg in ("lmcache", "lmcache/tools"):
            (tmp / pkg / "__init__.py").write_text("")
        for pkg in ("lmcache", "lmcache.tools"):
            sys.modules.pop(pkg, None)
        sys.path.insert(0, str(tmp))
        try:
            importlib.invalidate_caches()
            module = importlib.import_module(name)
        finally:
            sys.path.remove(str(tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return module


def run_lmcache(events: list[dict], capacities_chunks, bytes_per_chunk: int) -> np.ndarray:
    """LMCache's ``total_hit_tokens`` at each capacity (chunks), its fast LRU, one run each."""
    sim = lmcache_simulator()
    return np.array([sim.simulate(events, int(c) * bytes_per_chunk, bytes_per_chunk, fast=True)["total_hit_tokens"]
                     for c in np.asarray(capacities_chunks).reshape(-1)], dtype=np.int64)


def lmcache_events(path: str | Path) -> list[dict]:
    """LMCache's own loader (sorted by timestamp, stable)."""
    return lmcache_simulator().load_lookup_events([Path(path)])


def ours_lmcache(df: pl.DataFrame, capacities_chunks) -> np.ndarray:
    """tiered-kv under ``--semantics lmcache`` (plain LRU curve, one pass) at each capacity (chunks).

    LMCache never runs with fewer than one chunk (``max(1, bytes // bytes_per_chunk)``).
    """
    from tiered_kv.sim.curves import lru_curve
    from tiered_kv.sim.peers.semantics import get_semantics
    from tiered_kv.sim.trace_replay import compile_trace

    trace = compile_trace(df, get_semantics("lmcache").options)
    chunks = np.maximum(np.asarray(capacities_chunks, dtype=np.int64).reshape(-1), 1)
    return lru_curve(trace, chunks * trace.uniform_block_size).hit_tokens
