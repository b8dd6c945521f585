"""A compiled trace kept on disk, so a command run again on the same file skips reading it.

``tiered-kv simulate|curves --trace FILE`` spends much of its start-up reading and validating the
file (polars, JSONL, chained ids) and flattening it (:func:`~tiered_kv.sim.trace_replay.compile_trace`),
while the flat arrays of the result are small (the conversation trace: about 7 MB) and load with
numpy alone, without importing polars. The first run stores them under
``$XDG_CACHE_HOME/tiered-kv/traces``; later runs load them. The key covers everything the arrays
depend on: the file (resolved path, size, modification time in ns), the load arguments (format,
traffic class, block size), the replay options, and the source code of the trace loaders, of the
chained keys and of the replay engine (editing any of them changes the key). Validation ran, and
any loader warning (timestamps out of order) was shown, when the entry was written. A cache file
that cannot be read is ignored and written again; only the newest :data:`KEEP` entries are kept.
``TIERED_KV_TRACE_CACHE`` names another folder; ``0`` turns the cache off.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from dataclasses import fields
from pathlib import Path

import numpy as np

from tiered_kv.sim.trace_replay import CompiledTrace, ReplayOptions, compile_trace

ENV = "TIERED_KV_TRACE_CACHE"
KEEP = 32
#: Bump when the file layout changes.
VERSION = 1
#: Every array of a compiled trace (all its fields but ``class_names``, stored as JSON).
_ARRAYS = tuple(f.name for f in fields(CompiledTrace) if f.name != "class_names")


def cache_dir() -> Path | None:
    """The cache folder, or None when ``TIERED_KV_TRACE_CACHE=0`` turns the cache off."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in ("0", "off", "false", "no"):
        return None
    if value:
        return Path(value)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tiered-kv" / "traces"


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    """Digest of the source the cached arrays depend on (loaders, chained keys, replay engine)."""
    sim = Path(__file__).resolve().parent
    files = [*sorted((sim / "traces").glob("*.py")), sim / "trace_replay.py", sim.parent / "keys.py"]
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def cache_key(path: Path, *, format: str, traffic_class: str | None, block_size: int | None,
              options: ReplayOptions) -> str:
    """The entry name for ``path`` loaded and compiled with these arguments."""
    st = path.stat()
    parts = [VERSION, str(path.resolve()), st.st_size, st.st_mtime_ns, format, traffic_class, block_size,
             repr(options), np.__version__, _code_digest()]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def load_compiled_trace(path: str | Path, *, format: str = "auto", traffic_class: str | None = None,
                        block_size: int | None = None, options: ReplayOptions | None = None) -> CompiledTrace:
    """``compile_trace(load_trace(path, ...), options)``, from the cache when it holds it."""
    options = options or ReplayOptions()
    path = Path(path)
    folder = cache_dir()
    entry = None
    if folder is not None and path.is_file():  # else no cache, or let load_trace say what is wrong
        entry = folder / f"{cache_key(path, format=format, traffic_class=traffic_class, block_size=block_size, options=options)}.npz"
        trace = _read(entry)
        if trace is not None:
            return trace
    from tiered_kv.sim.traces import load_trace

    trace = compile_trace(load_trace(path, format, traffic_class, block_size=block_size), options)
    if entry is not None:
        _write(entry, trace)
    return trace


def _read(entry: Path) -> CompiledTrace | None:
    try:
        with np.load(entry, allow_pickle=False) as z:
            arrays = {name: z[name] for name in _ARRAYS}
            names = tuple(json.loads(str(z["class_names"])))
    except Exception:  # missing, truncated or from another layout: compile again
        return None
    return CompiledTrace(class_names=names, **arrays)


def _write(entry: Path, trace: CompiledTrace) -> None:
    """Write to a temporary name and rename into place; a folder that cannot be written is skipped."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-", suffix=".npz")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, class_names=np.array(json.dumps(list(trace.class_names))),
                         **{name: getattr(trace, name) for name in _ARRAYS})
            os.replace(tmp, entry)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        old = sorted(entry.parent.glob("*.npz"), key=lambda p: p.stat().st_mtime, reverse=True)[KEEP:]
        for stale in old:
            stale.unlink(missing_ok=True)
    except OSError:
        pass
