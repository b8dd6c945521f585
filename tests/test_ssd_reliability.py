"""SSD tier under concurrency, crashes and damage on a real directory (LocalStore).

* 4 writers, 2 readers and 1 GC process share one store for a few seconds: every hit the
  readers get is compared with the FP4 reference of the bytes that key stands for.
* A writer is killed with SIGKILL in the middle of puts: no chunk reads as valid unless it is
  complete, and verify/gc clean up what it left.
* Truncated files and deleted metadata objects on disk.
"""

import multiprocessing as mp
import os
import signal
import time
import warnings

import pytest
import torch
from zarr.storage import LocalStore

from tiered_kv.keys import block_keys
from tiered_kv.testing import store_suite as suite
from tiered_kv.tiers.ssd import SSDConfig, SSDTier, layout
from tiered_kv.units import DAY_S


@pytest.mark.slow
def test_writers_readers_and_gc_share_a_store(tmp_path):
    # forkserver: one clean process imports torch once, then forks the workers (importing torch
    # in 7 fresh interpreters costs minutes on 2 shared cores; forking pytest itself is unsafe)
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["tiered_kv.testing.store_suite"])
    roles = ["writer"] * 4 + ["reader"] * 2 + ["gc"]
    barrier = ctx.Barrier(len(roles))
    results = ctx.Queue()
    refs = suite.stress_references()
    assert torch.equal(refs[1], suite.reference_kv(suite.stress_kv(suite.stress_tokens(1)), "mxfp4"))
    procs = [ctx.Process(target=suite.stress_worker,
                         args=(role, str(tmp_path), 3.0, seed, barrier, results, refs))
             for seed, role in enumerate(roles)]
    for p in procs:
        p.start()
    outs = [results.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    errors = [o["errors"] for o in outs if o["errors"]]
    assert not errors, errors[0]
    readers = [o for o in outs if o["role"] == "reader"]
    assert sum(o["wrong"] for o in outs) == 0
    assert sum(o["checked_blocks"] for o in readers) > 0, outs  # the readers did see hits
    assert all(o["ops"] > 0 for o in outs), outs
    tier = SSDTier(LocalStore(tmp_path), namespace=suite.namespace(), config=SSDConfig(background_touch=False))
    report = tier.verify()
    assert report["corrupt"] == [] and report["strays"] == []


@pytest.mark.slow
def test_sigkill_mid_put_leaves_nothing_that_reads_as_valid(tmp_path):
    store_dir, ready = tmp_path / "store", tmp_path / "ready"
    ctx = mp.get_context("forkserver")  # a real separate process, without re-importing torch
    ctx.set_forkserver_preload(["tiered_kv.testing.store_suite"])
    proc = ctx.Process(target=suite.kill_target, args=(str(store_dir), str(ready)))
    proc.start()
    deadline = time.time() + 120
    while not ready.exists():
        assert proc.is_alive(), "writer died before it was killed"
        assert time.time() < deadline
        time.sleep(0.05)
    time.sleep(0.4)  # in the middle of later puts
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    assert proc.exitcode == -signal.SIGKILL

    from tiered_kv.keys import Namespace

    ns = Namespace(model="kill", fmt="mxfp4", block_size=64, kv_heads=8, head_dim=256)
    tier = SSDTier(store_dir, namespace=ns, config=SSDConfig(background_touch=False, partial_grace=0.0, orphan_grace=0.0))
    # every chunk that is visible is complete: a full read + CRC of the store finds nothing corrupt
    report = tier.verify(repair=False)
    assert report["corrupt"] == [] and report["chunks_ok"] >= 16
    assert all(s.endswith(".partial") for s in report["strays"]), report["strays"]
    hit = tier.get_prefix(torch.arange(64 * 16))
    assert hit.blocks == 16 and tier.counters["corrupt_removed"] == 0
    # gc removes the partial files and any unreachable chunk the kill left behind
    gc = tier.gc()
    assert gc["stray_objects"] == len(report["strays"])
    after = tier.verify(repair=False)
    assert after["strays"] == [] and after["unreachable_chunks"] == 0 and after["corrupt"] == []
    assert not list(store_dir.rglob("*.partial"))


def test_truncated_file_on_disk_is_a_miss_and_removed(tmp_path):
    tier = SSDTier(tmp_path, namespace=suite.namespace(), clock=suite.Clock(), config=SSDConfig(background_touch=False))
    toks = torch.arange(32)
    tier.put(toks, suite.make_kv(32), "c")
    path = tmp_path / layout.chunk_path(block_keys(toks, tier.namespace)[2])
    os.truncate(path, path.stat().st_size - 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert tier.get_prefix(toks).blocks == 2
    assert not path.exists() and tier.counters["corrupt_removed"] == 1


def test_deleted_metadata_objects_are_recreated(tmp_path):
    import zarr

    ns = suite.namespace()
    tier = SSDTier(tmp_path, namespace=ns, clock=suite.Clock(), config=SSDConfig(background_touch=False))
    toks = torch.arange(16)
    tier.put(toks, suite.make_kv(16), "c")
    (tmp_path / "zarr.json").unlink()
    (tmp_path / f"namespaces/{ns.digest.hex()}/zarr.json").unlink()
    assert tier.get_prefix(toks).blocks == 2  # chunks are self-describing
    again = SSDTier(tmp_path, namespace=ns, clock=suite.Clock(), config=SSDConfig(background_touch=False))
    assert zarr.open_group(str(tmp_path), mode="r").attrs["tiered_kv"]["layout"] == layout.LAYOUT
    assert again.stats()["chunks"] == 2


def test_access_records_survive_gc_of_their_tail(tmp_path):
    clock = suite.Clock()
    ns = suite.namespace()
    probe = SSDTier(tmp_path / "probe", namespace=ns, clock=clock, config=SSDConfig(background_touch=False))
    probe.put(torch.arange(8), suite.make_kv(8), "c")
    chunk = probe.stats()["bytes"]
    tier = SSDTier(tmp_path / "s", namespace=ns, clock=clock, ttl="1d", capacity_bytes=int(3.5 * chunk),
                   high_watermark=0.99, low_watermark=0.9, config=SSDConfig(background_touch=False, auto_gc=False))
    long, short = torch.arange(32), torch.arange(24)
    tier.put(long, suite.make_kv(32), "c")
    clock.advance(0.5 * DAY_S)
    tier.get_prefix(long)  # one access record, on the tail (block 3)
    report = tier.gc()  # over the high watermark: evicts the tail; its record moves to block 2
    assert report["evicted_chunks"] == 1 and report["access_records_moved"] == 1
    clock.advance(0.6 * DAY_S)  # put 1.1 d ago (> ttl), read 0.6 d ago (< ttl)
    assert tier.gc()["expired_chunks"] == 0
    assert tier.get_prefix(long).blocks == 3 and tier.get_prefix(short).blocks == 3
