"""The compiled-trace cache gives back exactly what compiling the file gives, and notices changes."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tiered_kv.sim import trace_cache as tc
from tiered_kv.sim.trace_replay import ReplayOptions, compile_trace
from tiered_kv.sim.traces import load_trace, random_trace, shipped_trace


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv(tc.ENV, str(folder))
    return folder


def _same(a, b) -> None:
    assert a.class_names == b.class_names
    for name in tc._ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name


def _write_trace(path, seed: int) -> None:
    random_trace(seed, 40).write_parquet(path)


@pytest.mark.parametrize("options", [ReplayOptions(), ReplayOptions(warmup_fraction=0.5, order="file"),
                                     ReplayOptions(clamp_to_input=False, full_blocks_only=True)])
def test_a_cached_trace_equals_a_fresh_compile(cache, options):
    path = shipped_trace("conversation")
    fresh = compile_trace(load_trace(path), options)
    first = tc.load_compiled_trace(path, options=options)
    assert len(list(cache.glob("*.npz"))) == 1
    second = tc.load_compiled_trace(path, options=options)
    _same(first, fresh)
    _same(second, fresh)
    assert second.uniform_block_size == fresh.uniform_block_size


def test_the_key_follows_the_file_the_arguments_and_the_options(cache, tmp_path):
    path = tmp_path / "t.parquet"
    _write_trace(path, 1)
    a = tc.load_compiled_trace(path)
    _same(a, compile_trace(load_trace(path)))
    tc.load_compiled_trace(path, traffic_class="agent")
    tc.load_compiled_trace(path, options=ReplayOptions(warmup_fraction=0.25))
    assert len(list(cache.glob("*.npz"))) == 3
    _write_trace(path, 2)  # new content (and size or modification time)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    b = tc.load_compiled_trace(path)
    _same(b, compile_trace(load_trace(path)))
    assert not np.array_equal(a.request_id, b.request_id) or not np.array_equal(a.blocks, b.blocks)


def test_a_broken_entry_is_compiled_again_and_the_cache_can_be_turned_off(cache, tmp_path, monkeypatch):
    path = tmp_path / "t.parquet"
    _write_trace(path, 3)
    tc.load_compiled_trace(path)
    (entry,) = cache.glob("*.npz")
    entry.write_bytes(b"not a zip file")
    _same(tc.load_compiled_trace(path), compile_trace(load_trace(path)))
    assert np.load(entry)["blocks"].size  # written again
    monkeypatch.setenv(tc.ENV, "0")
    assert tc.cache_dir() is None
    entry.unlink()
    tc.load_compiled_trace(path)
    assert not list(cache.glob("*.npz"))


def test_errors_in_the_file_are_raised_as_without_a_cache(cache, tmp_path):
    with pytest.raises(FileNotFoundError):
        tc.load_compiled_trace(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, 2, 3]}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        tc.load_compiled_trace(bad)
    assert not list(cache.glob("*.npz"))


def test_only_the_newest_entries_are_kept(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(tc, "KEEP", 2)
    for seed in range(4):
        path = tmp_path / f"t{seed}.parquet"
        _write_trace(path, seed)
        tc.load_compiled_trace(path)
    assert len(list(cache.glob("*.npz"))) == 2


def test_a_cached_run_imports_no_polars(cache):
    code = ("import sys; from tiered_kv.sim.trace_cache import load_compiled_trace\n"
            "from tiered_kv.sim.traces import shipped_trace\n"
            "t = load_compiled_trace(shipped_trace('conversation')); print(t.n_requests, 'polars' in sys.modules)")
    env = {**os.environ, tc.ENV: str(cache)}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr
    assert runs[0].stdout.split() == ["12031", "True"]  # first run reads the file
    assert runs[1].stdout.split() == ["12031", "False"]  # second run loads the arrays
