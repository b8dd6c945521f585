"""The ahead-of-time kernels (tiered_kv.sim.aot): numba's results bit for bit, and numba whenever they do not fit.

The build is the one ``scripts/setup_env.sh`` made (``python -m tiered_kv.sim.aot``, about 20 s:
too long to repeat here); tests that need it skip, saying so, when it is absent.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tiered_kv.sim import aot
from tiered_kv.sim import curves as C
from tiered_kv.sim.policies import belady as B
from tiered_kv.sim.policies import lru as L
from tiered_kv.sim.trace_replay import ReplayOptions, compile_trace
from tiered_kv.sim.traces import random_trace

#: The kernels (aot.kernel_of: once numba has run, the modules' globals are its dispatchers).
KERNELS = {name: aot.kernel_of(obj) for name, obj in (
    ("stack", C._stack_distances), ("raw", C._raw_stack_distances), ("pass", B.stack_pass),
    ("belady", B._belady_kernel), ("cache", L._cache_kernel))}

needs_build = pytest.mark.skipif(aot.find_build() is None, reason="no ahead-of-time build of the simulator kernels "
                                 "(scripts/setup_env.sh makes it: python -m tiered_kv.sim.aot)")


@pytest.fixture(autouse=True)
def _fresh_lookup():
    aot.forget_build()
    yield
    aot.forget_build()


def _traces():
    """Small traces of odd shapes: one request, one block per request, long shared prefixes, warm-up, file order."""
    yield compile_trace(random_trace(0, n_requests=1))
    yield compile_trace(random_trace(1, n_requests=40, max_blocks=1))
    yield compile_trace(random_trace(2, n_requests=60, max_blocks=12, alphabet=2))
    yield compile_trace(random_trace(3, n_requests=50), ReplayOptions(warmup_fraction=0.5))
    yield compile_trace(random_trace(4, n_requests=80, classes=("a", "b", "c")), ReplayOptions(order="file"))


def _calls(tr):
    """(kernel, args) as the curves and simulate call sites build them, at several capacities."""
    nxt = B.next_use(tr)
    yield "stack", (tr.offsets, tr.blocks, tr.n_unique)
    yield "raw", (tr.blocks, tr.n_unique)
    n_cls = len(tr.class_names)
    weight = np.where(tr.counted[tr.access_request], tr.tokens, 0).astype(np.int64)
    cls = tr.class_codes[tr.access_request].astype(np.int64)
    for bounds in ([1], [1, 2, 5], list(range(1, tr.n_unique + 2))):
        yield "pass", (tr.blocks.astype(np.int64), nxt, nxt, np.int64(tr.n_accesses), weight, cls, n_cls, tr.n_unique,
                       np.array(bounds, np.int64), tr.chunk_tokens.astype(np.int64),
                       np.zeros(len(bounds) + 1, np.int64))
    depth = tr.depth.astype(np.int64)
    k = len(tr.class_names)
    for cap in (0, 1, 3, tr.n_unique + 1):
        yield "belady", (tr.offsets, tr.blocks, depth, nxt, tr.n_unique, np.int64(cap))
        ins = np.zeros(tr.n_accesses, np.bool_)
        yield "cache", (tr.offsets, tr.blocks, np.ones(tr.n_accesses), tr.timestamps,
                        tr.class_codes.astype(np.int64), tr.n_unique, k, np.full(k, np.inf), float(cap), float(cap),
                        False, ins)
    ttl = np.linspace(0.0, 6.0, k)
    w = tr.chunk_tokens.astype(np.float64) * 70.5
    yield "cache", (tr.offsets, tr.blocks, w, tr.timestamps, tr.class_codes.astype(np.int64), tr.n_unique, k, ttl,
                    float(w.sum() / 3), float(w.sum() / 5), True, np.zeros(0, np.bool_))


def _same(a, b) -> bool:
    """Equal bit for bit, through tuples; floats compared as their bytes."""
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes())
    return type(a) is type(b) and a == b


def _copy(args):
    return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


@needs_build
@pytest.mark.parametrize("t", range(5))
def test_aot_results_equal_numba_bit_for_bit(t):
    tr = list(_traces())[t]
    n = 0
    for name, args in _calls(tr):
        k = KERNELS[name]
        fn = k.aot_function(args)
        assert fn is not None, f"{name}: the call sites' argument types must fit the build"
        a_args, j_args = _copy(args), _copy(args)
        got, ref = fn(*a_args), aot.dispatcher_of(k)(*j_args)
        assert _same(got, ref), name
        assert all(_same(x, y) for x, y in zip(a_args, j_args, strict=True)), f"{name}: arrays written differently"
        n += 1
    assert n >= 12


@needs_build
def test_call_sites_use_the_build_and_match_numba():
    """The public functions give the same bits with the build and with TIERED_KV_AOT=0 (numba)."""
    code = """
import hashlib, sys
import numpy as np
from tiered_kv.sim import curves as C
from tiered_kv.sim.policies import LRU, TTL, Watermark, Belady
from tiered_kv.sim.trace_replay import compile_trace, replay
from tiered_kv.sim.traces import random_trace
tr = compile_trace(random_trace(7, n_requests=60))
caps = C.default_capacities(tr, 9)
parts = [C.lru_keys(tr), C.belady_curve(tr, caps).hit_tokens, C.belady_curve(tr, caps).written_tokens,
         C.lru_written_tokens(tr, caps)]
for pol in (LRU(capacity_tokens=40), TTL(ttl_seconds={"default": 3.0}), Watermark(capacity_bytes=10**7),
            Belady(capacity_tokens=40)):
    parts.append(replay(tr, pol).hit_tokens_per_request)
print(hashlib.sha256(b"".join(np.ascontiguousarray(p).tobytes() for p in parts)).hexdigest(), "numba" in sys.modules)
"""
    out = {}
    for flag in ("1", "0"):
        env = {**_env(), aot.ENV: flag}
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[flag] = proc.stdout.split()
    assert out["1"][0] == out["0"][0]
    assert out["1"][1] == "False", "the build served every kernel: numba must not be imported"
    assert out["0"][1] == "True"


def _env():
    import os

    env = dict(os.environ)
    env.pop("NUMBA_DISABLE_JIT", None)
    return env


@needs_build
def test_wrong_argument_types_fall_back_to_numba():
    tr = compile_trace(random_trace(5, n_requests=40))
    k = KERNELS["stack"]
    ref = k(tr.offsets, tr.blocks, tr.n_unique)
    assert k.aot_function((tr.offsets, tr.blocks, tr.n_unique)) is not None
    ro = tr.blocks.copy()
    ro.flags.writeable = False
    strided = np.repeat(tr.blocks, 2)[::2]
    wrong = [
        (tr.offsets, tr.blocks.astype(np.int64), tr.n_unique),  # another dtype (the build would read garbage)
        (tr.offsets, strided, tr.n_unique),  # not contiguous (the build would ignore the strides)
        (tr.offsets, ro, tr.n_unique),  # read-only: numba types it apart
        (tr.offsets, tr.blocks, np.int32(tr.n_unique)),  # a narrower scalar
        (tr.offsets, tr.blocks, float(tr.n_unique)),  # a float for an integer (the build would truncate)
        (tr.offsets, tr.blocks, True),  # a bool is not an int64
        (tr.offsets, tr.blocks[None, :], tr.n_unique),  # another ndim
        (list(tr.offsets), tr.blocks, tr.n_unique),  # not an array
    ]
    for args in wrong:
        assert k.aot_function(args) is None, args
    for args in wrong[:4]:  # numba takes these and gives the same distances
        assert np.array_equal(k(*args), ref)
    assert k.aot_function((tr.offsets, tr.blocks)) is None  # too few arguments: numba raises, as before
    with pytest.raises(TypeError):
        k(tr.offsets, tr.blocks)


@needs_build
def test_stale_or_missing_build_falls_back_with_identical_results(tmp_path, monkeypatch):
    """A copy of the build is used while its sources are unchanged; one edited byte makes it stale."""
    path, manifest = aot.find_build()
    tr = compile_trace(random_trace(6, n_requests=50))
    args = (tr.offsets, tr.blocks, tr.n_unique)
    with_build = KERNELS["stack"].aot_function(args)(*args)
    root = tmp_path / "pkg"
    for name in manifest["files"]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(aot.PACKAGE_ROOT / name, root / name)
    folder = tmp_path / "build"
    folder.mkdir()
    shutil.copy(path, folder / path.name)
    (folder / aot.MANIFEST).write_text(json.dumps(manifest))
    monkeypatch.setattr(aot, "PACKAGE_ROOT", root)
    monkeypatch.setattr(aot, "build_dirs", lambda: [folder])
    assert aot.find_build() == (folder / path.name, manifest)
    assert aot.fresh("tiered_kv.sim.curves", "_stack_distances")
    with (root / manifest["files"][0]).open("a") as f:
        f.write("# edited\n")
    aot.forget_build()
    assert aot.find_build() is None and not aot.fresh("tiered_kv.sim.curves", "_stack_distances")
    assert KERNELS["stack"].aot_function(args) is None
    assert _same(C.lru_keys(tr), with_build)  # through numba now
    monkeypatch.setattr(aot, "build_dirs", lambda: [tmp_path / "nothing"])
    aot.forget_build()
    assert aot.find_build() is None and KERNELS["stack"].aot_function(args) is None


def test_off_switches_skip_the_build(monkeypatch):
    for var, value in ((aot.ENV, "0"), ("NUMBA_DISABLE_JIT", "1")):
        with monkeypatch.context() as m:
            m.setenv(var, value)
            aot.forget_build()
            assert aot.find_build() is None and aot.extension() is None


def test_kernels_reach_their_dispatchers_and_jitted_callers_see_them():
    """numba's objects stay reachable (precompile, jit.preload and tests read them), and after the first
    numba call the modules' globals are dispatchers, so jitted callers compile against them."""
    import numba

    k = KERNELS["pass"]
    d = aot.dispatcher_of(k)
    assert isinstance(d, numba.core.registry.CPUDispatcher)
    assert aot.kernel_of(d) is aot.kernel_of(k) and k._cache is d._cache and k.py_func is d.py_func
    assert B.__dict__["_sift_up"] is aot.dispatcher_of(aot.kernel_of(B.__dict__["_sift_up"]))
    assert B.stack_hist.__wrapped__ is B.stack_hist.py_func
    one = np.zeros(3, np.int64)
    hist = B.stack_hist(one, one, one, np.int64(3), one, one, 1, 1, np.array([1], np.int64))  # numba only
    assert hist.shape == (1, 1)


def test_a_failed_build_says_so_in_one_line_and_exits_0(monkeypatch, capsys):
    def broken(folder=None):
        raise OSError("no C compiler found\nsecond line")

    monkeypatch.setattr(aot, "build", broken)
    assert aot.main() == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "not built" in out[0] and "no C compiler found" in out[0] and "JIT" in out[0]


def test_positional_signatures_are_refused():
    with pytest.raises(TypeError, match="aot="):
        aot.njit("int64(int64)")
    with pytest.raises(ValueError, match="scalar type"):
        aot._checker("int8")


@needs_build
def test_warm_simulator_commands_do_not_import_numba():
    """`curves` and `simulate` on the conversation trace, served by the build, never import numba."""
    code = """
import contextlib, io, sys
from tiered_kv.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    assert main(["curves", "--trace", "conversation", "--json"]) == 0
    assert main(["simulate", "--trace", "conversation", "--policy", "lru", "--capacity", "10000000", "--json"]) == 0
print("numba" in sys.modules, any(m.startswith(("numba.", "llvmlite")) for m in sys.modules))
"""
    proc = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["False", "False"]
