"""The simulator's numba kernels, compiled ahead of time at install, with numba as the fallback.

Why: a warm ``tiered-kv curves`` does 0.04 s of work, but importing numba costs about 0.2 s and
a first run (numba's cache empty) spends over a second compiling kernels. ``numba.pycc`` compiles
the kernels with explicit signatures into a C extension that needs neither numba nor LLVM at run
time; ``scripts/setup_env.sh`` builds it once (``python -m tiered_kv.sim.aot``), so a run whose
arguments fit loads a 0.5 ms extension instead.

:func:`njit` replaces ``numba.njit`` in the modules on the simulator commands' path: it returns a
:class:`Kernel`, which imports nothing. A call with arguments that match the kernel's ``aot=``
signature *exactly* (dtype, dimensions, C order, alignment, writeable arrays; Python or numpy
scalars of the same width) runs the extension's function; anything else (no ``aot=``, another
type, no build, a stale one, ``TIERED_KV_AOT=0``, ``NUMBA_DISABLE_JIT``) imports numba, makes
the real dispatcher of *every* kernel defined so far (``cache=True``, ``inline=...`` as written)
and points the modules' globals that named a :class:`Kernel` at its dispatcher, so that jitted
callers compiled from then on see dispatchers, exactly as with ``numba.njit``; the call then goes
to numba (a jitted caller that still names a :class:`Kernel`, in a module that defines none,
is typed as its dispatcher too: the kernel hands numba the dispatcher's ``_numba_type_``).
:func:`kernel_of` maps such a dispatcher back to its kernel, so call sites that use
:func:`tiered_kv.sim.policies.jit.call` still reach the extension afterwards, and
``Kernel.dispatcher`` (or any dispatcher attribute, e.g. ``_cache``, ``stats``) reaches numba's
object for code that inspects it.

The build: every kernel with ``aot=`` in :data:`MODULES` is typed by numba for those argument
types (its return type is numba's, not typed in by hand), then exported by ``pycc`` under
:attr:`Kernel.export_name`. A manifest beside the extension lists the source files the kernels
were compiled from (each kernel's module and every module of a kernel it calls) and the SHA-256
of those files and of this one; a run recomputes it and uses the build only when it is equal, so
an edited kernel never runs stale machine code (it runs under numba until the next build). The
build goes to ``tiered_kv/sim`` when that folder is writable, else to the user cache
(``$XDG_CACHE_HOME/tiered-kv/aot``); a run looks in both. Results are the same as numba's, bit
for bit (tests/test_aot_kernels.py): the same numba front end types and lowers the same code, for
a generic CPU of the machine's architecture.

This module imports no numpy and no numba until a kernel needs them, and statically nothing of
the simulator: the build imports :data:`MODULES` by name, whose kernels register here as the trie
policies register into the policy registry.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Modules whose ``aot=`` kernels the build compiles: those the curves and simulate commands run.
MODULES = ("tiered_kv.sim.curves", "tiered_kv.sim.policies.belady", "tiered_kv.sim.policies.lru")
#: ``TIERED_KV_AOT=0`` turns the build off for a process (numba always).
ENV = "TIERED_KV_AOT"
#: File names: the manifest and the extension's module-name prefix (the stamp completes it).
MANIFEST = "_aot_kernels.json"
PREFIX = "_aot_kernels_"
#: tiered_kv/, against which the manifest's source files are named.
PACKAGE_ROOT = Path(__file__).resolve().parent.parent

_KERNELS: list[Kernel] = []
_BY_DISPATCHER: dict[int, Kernel] = {}
_UNSET = object()
_STATE: dict[str, Any] = {"numba": False, "dirty": False, "ext": _UNSET}
_LOCK = threading.RLock()  # one thread makes the dispatchers and loads the extension


def build_dirs() -> list[Path]:
    """Where a build may live, in the order a run looks: beside this file, then the user cache."""
    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tiered-kv" / "aot"
    return [Path(__file__).resolve().parent, user]


def stamp(files: list[str]) -> str:
    """SHA-256 of this module's source and of ``files`` (paths under tiered_kv/), in order."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    for name in files:
        h.update(name.encode() + b"\0")
        h.update((PACKAGE_ROOT / name).read_bytes())
    h.update(sys.implementation.cache_tag.encode())
    return h.hexdigest()


def _disabled() -> bool:
    return os.environ.get(ENV, "1") == "0" or os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0")


def find_build() -> tuple[Path, dict] | None:
    """(extension path, manifest) of the first fresh build, or None; reads files, imports nothing."""
    if _disabled():
        return None
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for folder in build_dirs():
        try:
            manifest = json.loads((folder / MANIFEST).read_text())
            if manifest["stamp"] != stamp(list(manifest["files"])):
                continue  # a kernel's source changed since this build
            path = folder / (manifest["module"] + suffix)
            if path.is_file():
                return path, manifest
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def fresh(module: str, qualname: str) -> bool:
    """True when a fresh build exports ``module.qualname`` (numpy- and numba-free: for early checks)."""
    found = find_build()
    return found is not None and _export_name(module, qualname) in found[1].get("exports", {})


def extension() -> Any | None:
    """The fresh build's extension module (loaded once per process), or None."""
    with _LOCK:
        if _STATE["ext"] is _UNSET:
            ext = None
            found = find_build()
            if found is not None:
                path, manifest = found
                try:
                    spec = importlib.util.spec_from_file_location(manifest["module"], path)
                    ext = importlib.util.module_from_spec(spec)
                    spec.loader.exec_module(ext)
                except Exception:  # a build for another numpy ABI, a damaged file: numba serves
                    ext = None
            _STATE["ext"] = ext
        return _STATE["ext"]


def forget_build() -> None:
    """Look for the build again on the next call (after a build, or when a test moves it)."""
    _STATE["ext"] = _UNSET
    for k in _KERNELS:
        k._fn = _UNSET


def _export_name(module: str, qualname: str) -> str:
    return f"{module.replace('.', '_')}__{qualname}"


# --------------------------------------------------------------------------------------------
# argument checks: the extension trusts its caller (a wrong dtype reads garbage or crashes)


def _arg_specs(spec: str) -> list[str]:
    """Split ``"int64[::1], int64[:, ::1], float64"`` at its top-level commas."""
    out, depth, cur = [], 0, ""
    for ch in spec:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _checker(spec: str) -> Callable[[Any], bool]:
    """A predicate that is True exactly when numba would type the value as ``spec``."""
    import numpy as np

    name, _, dims = spec.partition("[")
    if not dims:
        if name == "int64":
            return lambda a: (type(a) is int and -(2**63) <= a < 2**63) or type(a) is np.int64
        if name == "float64":
            return lambda a: type(a) is float or type(a) is np.float64
        if name == "boolean":
            return lambda a: type(a) is bool or type(a) is np.bool_
        raise ValueError(f"aot signature: scalar type {name!r} is not supported (int64, float64, boolean)")
    parts = [p.strip() for p in dims.rstrip("]").split(",")]
    if not all(p == ":" for p in parts[:-1]) or parts[-1] not in (":", "::1"):
        raise ValueError(f"aot signature: array {spec!r}: use [:] or [::1] dimensions")
    dtype = np.dtype("bool" if name == "boolean" else name)
    ndim, c_order = len(parts), parts[-1] == "::1"

    def check(a: Any) -> bool:
        if type(a) is not np.ndarray or a.dtype != dtype or a.ndim != ndim:
            return False
        f = a.flags
        return f.aligned and f.writeable and (f.c_contiguous or not c_order)

    return check


# --------------------------------------------------------------------------------------------
# the lazy kernel


class Kernel:
    """A ``numba.njit`` kernel that runs from the ahead-of-time build when it can (module docstring)."""

    def __init__(self, py_func: Callable, options: dict[str, Any], aot: tuple[str, ...] | str | None) -> None:
        self.py_func = py_func
        self.options = options
        self.aot = _arg_specs(aot) if isinstance(aot, str) else (list(aot) if aot is not None else None)
        self.export_name = _export_name(py_func.__module__, py_func.__qualname__)
        self._dispatcher: Any = None
        self._checks: list[Callable[[Any], bool]] | None = None
        self._fn: Any = _UNSET
        functools.update_wrapper(self, py_func)

    @property
    def dispatcher(self) -> Any:
        """numba's dispatcher for this kernel (numba is imported and every kernel's made on first use)."""
        if self._dispatcher is None or _STATE["dirty"]:
            _use_numba()
        return self._dispatcher

    def aot_function(self, args: tuple) -> Callable | None:
        """The extension's function when the build is fresh and ``args`` match its signature exactly."""
        if self.aot is None:
            return None
        if self._fn is _UNSET:
            ext = extension()
            self._fn = None if ext is None else getattr(ext, self.export_name, None)
            if self._fn is not None:
                self._checks = [_checker(s) for s in self.aot]
        fn, checks = self._fn, self._checks
        if fn is None or len(args) != len(checks):
            return None
        for check, a in zip(checks, args, strict=True):
            if not check(a):
                return None
        return fn

    def __call__(self, *args: Any) -> Any:
        fn = self.aot_function(args)
        if fn is not None:
            return fn(*args)
        return self.dispatcher(*args)

    def __getattr__(self, name: str) -> Any:
        # only reached for names a Kernel lacks: numba's (stats, _cache, overloads, typeof_pyval, ...)
        if name.startswith("__") or name in ("_dispatcher", "_fn", "_checks", "aot", "py_func", "options"):
            raise AttributeError(name)
        return getattr(self.dispatcher, name)

    def __repr__(self) -> str:
        return f"<tiered_kv.sim.aot.Kernel {self.py_func.__module__}.{self.py_func.__qualname__}>"


def njit(*args: Any, aot: tuple[str, ...] | str | None = None, **options: Any) -> Any:
    """``numba.njit`` that defers numba: ``@njit(cache=True, aot="int64[::1], int64")`` (module docstring).

    ``aot``: the argument types the build exports (numba's spelling; arrays ``[:]``/``[::1]``,
    scalars int64, float64, boolean); without it the kernel always runs under numba.
    """
    def wrap(py_func: Callable) -> Kernel:
        k = Kernel(py_func, options, aot)
        _KERNELS.append(k)
        if _STATE["numba"]:
            _STATE["dirty"] = True  # made (and module globals pointed at it) on the next numba call
        return k

    if args and callable(args[0]) and len(args) == 1:
        return wrap(args[0])
    if args:
        raise TypeError("tiered_kv.sim.aot.njit: explicit signatures go in aot=..., not as a positional argument")
    return wrap


def kernel_of(obj: Any) -> Kernel | None:
    """The :class:`Kernel` of ``obj`` (itself, or the kernel whose dispatcher it is), else None."""
    if isinstance(obj, Kernel):
        return obj
    return _BY_DISPATCHER.get(id(obj))


def dispatcher_of(obj: Any) -> Any:
    """numba's dispatcher for a :class:`Kernel` (or ``obj`` itself when it is not one)."""
    return obj.dispatcher if isinstance(obj, Kernel) else obj


def _use_numba() -> None:
    """Make every kernel's numba dispatcher and point module globals naming kernels at them."""
    import numba

    with _LOCK:
        _STATE["numba"] = True
        _STATE["dirty"] = False
        for k in list(_KERNELS):
            if k._dispatcher is None:
                k._dispatcher = numba.njit(**k.options)(k.py_func)
                _BY_DISPATCHER[id(k._dispatcher)] = k
        seen: set[int] = set()
        for k in list(_KERNELS):
            g = k.py_func.__globals__
            if id(g) in seen:
                continue
            seen.add(id(g))
            for name, value in list(g.items()):
                if isinstance(value, Kernel) and value._dispatcher is not None:
                    g[name] = value._dispatcher


# --------------------------------------------------------------------------------------------
# the build (python -m tiered_kv.sim.aot)


def _called_kernels(k: Kernel) -> list[Kernel]:
    """Kernels that ``k``'s code names as globals (nested code objects included)."""
    names: set[str] = set()
    codes = [k.py_func.__code__]
    while codes:
        c = codes.pop()
        names.update(c.co_names)
        codes.extend(x for x in c.co_consts if hasattr(x, "co_names"))
    g = k.py_func.__globals__
    return [kk for n in sorted(names) if (kk := kernel_of(g.get(n))) is not None]


def _source_files(kernels: list[Kernel]) -> list[str]:
    """Source files (under tiered_kv/) of ``kernels`` and of every kernel they call, transitively."""
    seen: dict[int, Kernel] = {}
    todo = list(kernels)
    while todo:
        k = todo.pop()
        if id(k) not in seen:
            seen[id(k)] = k
            todo.extend(_called_kernels(k))
    files = {Path(k.py_func.__code__.co_filename).resolve().relative_to(PACKAGE_ROOT).as_posix()
             for k in seen.values()}
    return sorted(files)


def build(folder: Path | None = None) -> Path:
    """Compile every ``aot=`` kernel of :data:`MODULES` into an extension; returns its path.

    Goes to ``folder``, else the first writable of :func:`build_dirs`; replaces older builds there.
    """
    import tempfile
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pycc's pending-deprecation notice
        from numba.core import sigutils
        from numba.pycc import CC
    for name in MODULES:
        importlib.import_module(name)
    kernels = [k for k in _KERNELS if k.aot is not None and k.py_func.__module__ in MODULES]
    _use_numba()
    files = _source_files(kernels)
    digest = stamp(files)
    module = PREFIX + digest[:16]
    exports = {}
    cc = CC(module)
    cc.verbose = False
    for k in kernels:
        argtypes, _ = sigutils.normalize_signature("(" + ", ".join(k.aot) + ",)")
        k.dispatcher.compile(tuple(argtypes))  # numba's own typing gives the return type
        sig = k.dispatcher.overloads[tuple(argtypes)].signature.return_type(*argtypes)
        cc.export(k.export_name, sig)(k.py_func)
        exports[k.export_name] = str(sig)
    if folder is None:
        folder = next((d for d in build_dirs() if _writable(d)), None)
        if folder is None:
            raise OSError(f"no writable folder for the build among {[str(d) for d in build_dirs()]}")
    folder.mkdir(parents=True, exist_ok=True)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        cc.output_dir = tmp
        cc.output_file = module + suffix
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cc.compile()
        os.replace(Path(tmp) / (module + suffix), folder / (module + suffix))
        man = Path(tmp) / MANIFEST
        man.write_text(json.dumps({"module": module, "stamp": digest, "files": files, "exports": exports},
                                  indent=1) + "\n")
        os.replace(man, folder / MANIFEST)
    for old in folder.glob(PREFIX + "*"):
        if old.name != module + suffix:
            old.unlink(missing_ok=True)
    forget_build()
    return folder / (module + suffix)


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


def main() -> int:
    """Build, and say in one line where it went or why the simulator will JIT-compile instead."""
    import time

    t0 = time.perf_counter()
    try:
        path = build()
    except Exception as e:  # no compiler, no numba.pycc, a read-only install: never fail the setup
        first = (str(e).strip().splitlines() or [""])[0][:200]
        print(f"setup: ahead-of-time simulator kernels not built ({type(e).__name__}: {first}); "
              "the simulator will JIT-compile them with numba instead")
        return 0
    print(f"setup: ahead-of-time simulator kernels built in {time.perf_counter() - t0:.0f} s: {path}")
    return 0


if __name__ == "__main__":
    # the kernels register into the imported module, not into this __main__ copy of it
    from tiered_kv.sim import aot as _aot

    sys.exit(_aot.main())
