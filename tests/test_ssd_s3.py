"""The SSD tier on S3 (issue 16): the shared store suite, put-if-absent, a writer killed mid-put,
4 writer processes + 2 readers + 2 GC instances, and one-line errors, against moto's S3 server
on 127.0.0.1 (nothing in these tests reaches another address), plus obstore's in-memory store
(the same code path without HTTP).
"""

import http.server
import multiprocessing as mp
import os
import signal
import socket
import threading
import time
import uuid
import warnings

import pytest
import torch

pytest.importorskip("obstore")
pytest.importorskip("moto")

import obstore as obs  # noqa: E402
from zarr.storage import ObjectStore  # noqa: E402

from tiered_kv.cli import main  # noqa: E402
from tiered_kv.keys import block_keys  # noqa: E402
from tiered_kv.testing import store_suite as suite  # noqa: E402
from tiered_kv.testing.local_s3 import LocalS3  # noqa: E402
from tiered_kv.testing.store_suite import SSDTierSuite  # noqa: E402
from tiered_kv.tiers.ssd import (  # noqa: E402
    SSDConfig,
    SSDTier,
    StoreAccessError,  # noqa: E402
    layout,  # noqa: E402
)


@pytest.fixture(scope="module")
def s3():
    with LocalS3() as server:
        server.default_bucket = server.bucket()
        yield server


def _prefix() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


class TestS3Store(SSDTierSuite):
    """Every behaviour of the local tier, on a real S3 server over HTTP."""

    @pytest.fixture
    def make_store(self, s3):
        # a bucket per store: moto's LIST walks the whole bucket
        return lambda: ObjectStore(s3.store(s3.bucket(), "kv"))


class TestObstoreMemoryStore(SSDTierSuite):
    """obstore's in-memory store: the object-store code path without a network."""

    @pytest.fixture
    def make_store(self):
        from obstore.store import MemoryStore

        return lambda: ObjectStore(MemoryStore())


def _tier(store, **kw) -> SSDTier:
    return suite.make_tier(store, **kw)


def test_put_if_absent_verifies_what_is_there(s3):
    raw = s3.store(s3.default_bucket, _prefix())
    t = _tier(raw)
    toks = torch.arange(24)
    keys = block_keys(toks, t.namespace)
    kv = suite.make_kv(24)
    assert t.put(toks[:16], kv[:16], "c") == 2
    etag = obs.head(raw, layout.chunk_path(keys[0]))["e_tag"]
    # blocks 0-1 exist, block 2 does not: every block goes out with If-None-Match, and the
    # existing ones are checked, found valid and kept (not rewritten)
    assert t.put(toks, kv, "c") == 1 and t.counters["already_present"] == 2
    assert obs.head(raw, layout.chunk_path(keys[0]))["e_tag"] == etag
    # a damaged object under a key is replaced by a writer that finds it there
    obs.put(raw, layout.chunk_path(keys[1]), b"TKVC garbage")
    t.delete(keys[2])
    with pytest.warns(RuntimeWarning, match="existing object failed its checks; replaced"):
        assert t.put(toks, kv, "c") == 2
    assert torch.equal(t.get_prefix(toks).kv(), suite.reference_kv(kv, "mxfp4"))


def test_concurrent_writers_of_one_key_agree(s3):
    raw = s3.store(s3.default_bucket, _prefix())
    toks = torch.arange(64)
    tiers = [_tier(raw) for _ in range(4)]
    barrier = threading.Barrier(4)
    written = []

    def put(t):
        barrier.wait()
        written.append(t.put(toks, suite.make_kv(64), "c"))

    threads = [threading.Thread(target=put, args=(t,)) for t in tiers]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sum(written) >= 8  # every block written at least once (races may both succeed)
    hit = _tier(raw).get_prefix(toks)
    assert hit.blocks == 8 and torch.equal(hit.kv(), suite.reference_kv(suite.make_kv(64), "mxfp4"))
    assert _tier(raw).verify()["problems"] == 0


def test_get_prefix_stops_at_the_first_gap(s3):
    raw = s3.store(s3.default_bucket, _prefix())
    t = _tier(raw, io_concurrency=4)
    toks = torch.arange(8 * 40)
    t.put(toks, suite.make_kv(8 * 40), "c")
    t.delete(block_keys(toks, t.namespace)[13])
    hit = t.get_prefix(toks)
    assert hit.blocks == 13 and torch.equal(hit.kv(), suite.reference_kv(suite.make_kv(8 * 40), "mxfp4")[:104])


def test_url_and_cli_use_the_environment(s3, monkeypatch, capsys):
    import json

    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    url = f"s3://{s3.default_bucket}/{_prefix()}"
    t = SSDTier(url, namespace=suite.namespace(), config=SSDConfig(background_touch=False))
    t.put(torch.arange(24), suite.make_kv(24), "agent")
    assert t.backend.name.startswith(url)
    assert main(["store", "stats", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chunks"] == 3
    assert main(["store", "verify", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chunks_ok"] == 3
    assert main(["store", "gc", url, "--ttl", "1h", "--now", "+2h", "--part", "1/2", "--json"]) == 0
    assert main(["store", "gc", url, "--ttl", "1h", "--now", "+2h", "--part", "2/2", "--json"]) == 0
    capsys.readouterr()
    assert main(["store", "stats", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chunks"] == 0
    empty = f"s3://{s3.default_bucket}/{_prefix()}"
    assert main(["store", "stats", empty]) == 2
    assert "is not an SSD-tier store" in capsys.readouterr().err


# ------------------------------------------------------------------------ bad endpoints, one line

def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Forbidden(http.server.BaseHTTPRequestHandler):
    def _deny(self):
        body = (b'<?xml version="1.0"?><Error><Code>InvalidAccessKeyId</Code><Message>The AWS Access Key Id '
                b"you provided does not exist in our records.</Message></Error>")
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _deny

    def log_message(self, *args):
        pass


@pytest.fixture
def forbidden():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Forbidden)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _s3_env(monkeypatch, endpoint):
    from tiered_kv.testing import local_s3

    for k, v in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": local_s3.ACCESS_KEY,
                 "AWS_SECRET_ACCESS_KEY": local_s3.SECRET_KEY, "AWS_REGION": "us-east-1",
                 "AWS_ALLOW_HTTP": "true"}.items():
        monkeypatch.setenv(k, v)


@pytest.mark.parametrize("case", ["unreachable", "missing_bucket", "wrong_credentials"])
def test_bad_endpoints_are_one_clear_line(case, s3, forbidden, monkeypatch, capsys):
    endpoint = {"unreachable": f"http://127.0.0.1:{_closed_port()}", "missing_bucket": s3.endpoint,
                "wrong_credentials": forbidden}[case]
    want = {"unreachable": "cannot connect to", "missing_bucket": "bucket 'no-such-bucket' does not exist",
            "wrong_credentials": "credentials rejected"}[case]
    _s3_env(monkeypatch, endpoint)
    url = "s3://no-such-bucket/kv"
    t0 = time.time()
    with pytest.raises(StoreAccessError) as err:
        SSDTier(url, namespace=suite.namespace())
    assert time.time() - t0 < 30
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"store {url}") and want in msg and endpoint in msg, msg
    assert main(["store", "stats", url]) == 2
    out = capsys.readouterr().err
    assert out.count("\n") == 1 and want in out and url in out


# ------------------------------------------------------------------------ processes against the server

@pytest.mark.slow
def test_sigkill_mid_put_leaves_nothing_that_reads_as_valid(s3):
    spec = s3.spec(s3.default_bucket, _prefix())
    ready = f"/tmp/tkv-s3-ready-{uuid.uuid4().hex}"
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["tiered_kv.testing.store_suite"])
    proc = ctx.Process(target=suite.kill_target, args=(spec, ready, 4, 128))  # 35 KB chunks
    proc.start()
    deadline = time.time() + 120
    try:
        while not os.path.exists(ready):
            assert proc.is_alive(), "writer died before it was killed"
            assert time.time() < deadline
            time.sleep(0.05)
        time.sleep(0.4)  # in the middle of later puts
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
    finally:
        if os.path.exists(ready):
            os.unlink(ready)
    assert proc.exitcode == -signal.SIGKILL
    ns = suite.kill_namespace(4, 128)
    tier = SSDTier(suite.open_spec(spec), namespace=ns, config=SSDConfig(background_touch=False, orphan_grace=0.0))
    report = tier.verify(repair=False)  # one PUT per chunk: nothing partial, nothing stray
    assert report["corrupt"] == [] and report["strays"] == [] and report["chunks_ok"] >= 16
    hit = tier.get_prefix(torch.arange(64 * 16))
    assert hit.blocks == 16 and tier.counters["corrupt_removed"] == 0
    tier.gc()
    after = tier.verify(repair=False)
    assert after["problems"] == 0 and after["unreachable_chunks"] == 0


@pytest.mark.slow
def test_writers_readers_and_two_gc_instances_share_a_bucket(s3):
    spec = s3.spec(s3.default_bucket, _prefix())
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["tiered_kv.testing.store_suite"])
    roles = ["writer"] * 4 + ["reader"] * 2 + ["gc1/2", "gc2/2"]
    barrier = ctx.Barrier(len(roles))
    results = ctx.Queue()
    refs = suite.stress_references()
    procs = [ctx.Process(target=suite.stress_worker, args=(role, spec, 3.0, seed, barrier, results, refs))
             for seed, role in enumerate(roles)]
    for p in procs:
        p.start()
    outs = [results.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    errors = [o["errors"] for o in outs if o["errors"]]
    assert not errors, errors[0]
    assert sum(o["wrong"] for o in outs) == 0
    assert sum(o["checked_blocks"] for o in outs if o["role"] == "reader") > 0, outs
    assert all(o["ops"] > 0 for o in outs), outs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = SSDTier(suite.open_spec(spec), namespace=suite.namespace(), config=SSDConfig(background_touch=False)).verify()
    assert report["corrupt"] == [] and report["strays"] == []


def test_bench_store_on_a_bucket_reports_ratios_and_cleans_up(s3, monkeypatch, capsys):
    import json

    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    bucket = s3.bucket()
    assert main(["bench", "store", "--url", f"s3://{bucket}/bench", "--tokens", "512", "--repeat", "1",
                 "--latency-runs", "2", "--concurrency", "8", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["backend"] == "s3" and r["concurrency"] == 8 and r["get_prefix_p99_ms"] > 0
    assert r["put_ratio_vs_raw"] > 0 and r["get_ratio_vs_raw"] > 0 and set(r["sizes"]) == {"model", "deepseek_890Bpt"}
    assert obs.list(s3.store(bucket)).collect() == []  # everything it wrote is gone


def test_rejected_credentials_name_the_services_own_code():
    """obstore's PermissionDeniedError carrying "AccessDenied": the code is named, not the type."""
    from types import SimpleNamespace

    from tiered_kv.tiers.ssd.object_backend import access_error

    class PermissionDeniedError(Exception):
        pass

    store = SimpleNamespace(store=SimpleNamespace(config={"bucket": "b", "endpoint": "http://127.0.0.1:9"}))
    got = str(access_error(store, PermissionDeniedError("403: <Code>AccessDenied</Code>"), 5.0))
    assert "credentials rejected by http://127.0.0.1:9 (AccessDenied)" in got, got
    got = str(access_error(store, PermissionDeniedError("denied"), 5.0))
    assert "(PermissionDeniedError)" in got, got
