"""A real vLLM engine (CPU build, in .venv-engine) storing and loading its KV through the SSD tier.

Every engine is a process of the engine venv (tiered_kv.connectors.client), one-process vLLM with
a tiny random Llama built here (2 layers, 2 KV heads of 64 dims, 32-token blocks). Engines, in
order, sharing one module-scoped state so that the suite starts as few as it can:

- R: no connector, no prefix cache, no chunking: the reference greedy tokens and logits;
- A: bf16 connector, prefix caching, chunked prefill (64-token batches): stores, captures a trace;
- K: stores a long new prompt and is SIGKILLed while its chunks are being written;
- B: a fresh engine on the same store: loads what A stored (expected cached tokens, identical
  greedy tokens), survives K's debris, and treats a corrupted chunk as a miss;
- F: MXFP4 and NVFP4 connectors: first-token log-probabilities of a tier hit beside R's.

Two more engines, each on its own store, replay their captured trace through the simulator:
T (per-class TTLs) and C (a capacity of a few chunks under the tier's watermark GC).

Engines that share nothing but the model (R and A, the two F, T and C) run two at a time, each in
its own process with one thread: an engine's start (importing vLLM) is most of its cost, and the
machine has a core for each.

Without the engine venv these tests skip with the command that makes it; under CI (``CI`` set,
as .ci/run has it) a missing engine venv is a failure, never a skip.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tiered_kv.connectors.client import (
    EngineError,
    EngineProcess,
    EngineUnavailable,
    build_model,
    engine_python,
)

BS = 32
CHUNK = 64  # max_num_batched_tokens of engine A: every prompt here is prefilled in chunks


def _engine_or_skip() -> None:
    try:
        engine_python()
    except EngineUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs the engine venv (make test creates it): {exc}")
        pytest.skip(str(exc))


pytestmark = pytest.mark.slow


def _two_at_a_time(*runs: Callable[[], Any]) -> list[Any]:
    """Each run's result, in order; the runs (engine sessions of their own) overlap two at a time."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return [f.result() for f in [pool.submit(run) for run in runs]]


def _prompts() -> dict[str, list[int]]:
    rng = random.Random(25)
    draw = lambda n: [rng.randrange(1, 1000) for _ in range(n)]  # noqa: E731
    base = draw(300)
    return {
        "base": base,                          # 9 full blocks + 12 tokens
        "shared": base[:200] + draw(110),      # shares 6 full blocks (192 tokens) with base
        "long": draw(700),                     # 11 chunks of 64 tokens, 21 full blocks
        "exact": draw(4 * BS),                 # a multiple of the block size: its last block is never loaded
    }


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    _engine_or_skip()
    return build_model(tmp_path_factory.mktemp("model") / "model")


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("engine")
    model = tiny_model
    prompts = _prompts()
    names = list(prompts)
    state = {"root": root, "model": str(model), "prompts": prompts, "names": names,
             "store": str(root / "store"), "capture": str(root / "capture.jsonl")}
    order = ["base", "shared", "long", "exact", "base"]

    def reference() -> dict:
        with EngineProcess(log=root / "R.log") as eng:
            eng.start(model=str(model), prefix_caching=False, store=None)
            return dict(zip(names, eng.generate([prompts[n] for n in names], max_tokens=6, logprobs=20),
                            strict=True))

    def stored() -> list:
        with EngineProcess(log=root / "A.log") as eng:
            eng.start(model=str(model), store=state["store"], capture=state["capture"],
                      max_num_batched_tokens=CHUNK)
            return list(zip(order, eng.generate([prompts[n] for n in order], max_tokens=6), strict=True))

    state["ref"], state["A"] = _two_at_a_time(reference, stored)
    return state


def test_an_engine_deletes_its_own_temporary_log_on_a_clean_stop_and_keeps_a_given_one(tmp_path, monkeypatch):
    _engine_or_skip()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with EngineProcess() as eng:
        own = eng.log_path
        assert own.parent == tmp_path / "tmp" and own.exists()
    assert eng.proc.returncode == 0 and not own.exists()
    with pytest.raises(EngineError), EngineProcess() as failed:  # an error reply: the worker stops cleanly
        failed.call("no such command")
    assert failed.proc.returncode == 0 and failed.log_path.exists()  # but what went wrong may be in the log
    with EngineProcess(log=tmp_path / "given.log"):
        pass
    assert (tmp_path / "given.log").exists()
    crashed = EngineProcess()
    crashed.proc.kill()  # an engine that died: the log an error would name must stay
    crashed.proc.wait()
    crashed.close()
    assert crashed.proc.returncode != 0 and crashed.log_path.exists()


def test_engine_a_measures_partial_prefix_hits_and_stores_chunked_prefills(world):
    got = {(i, n): r for i, (n, r) in enumerate(world["A"])}
    assert got[(0, "base")]["connector"]["hit_tokens"] == 0
    # a shared 200-token prefix is 6 whole blocks: a partial hit at block granularity
    assert got[(1, "shared")]["connector"]["hit_tokens"] == 6 * BS
    assert got[(1, "shared")]["cached_tokens"] == 6 * BS
    assert got[(2, "long")]["connector"]["hit_tokens"] == 0
    # the repeat finds all 9 full blocks of base in the tier (stored chunk by chunk while prefilling)
    assert got[(4, "base")]["connector"]["hit_tokens"] == 9 * BS
    for i, (name, r) in enumerate(world["A"]):
        assert r["tokens"] == world["ref"][name]["tokens"], f"request {i} ({name}): chunked + cached != reference"


def test_a_fresh_engine_loads_what_an_earlier_one_stored(world):
    prompts, names = world["prompts"], world["names"]
    with EngineProcess(log=world["root"] / "B.log") as eng:
        eng.start(model=world["model"], store=world["store"], prefix_caching=True)
        results = dict(zip(names, eng.generate([prompts[n] for n in names], max_tokens=6), strict=True))
    expect = {"base": 9 * BS, "shared": 9 * BS, "long": 21 * BS, "exact": 3 * BS}
    for name in names:
        r = results[name]
        full = len(prompts[name]) // BS
        assert r["connector"]["hit_tokens"] == full * BS, name
        # vLLM's own prefix cache first (shared's first 6 blocks, after base), the tier for the rest,
        # never the block of the last token
        c = r["connector"]
        assert c["local_tokens"] == (6 * BS if name == "shared" else 0), name
        assert c["local_tokens"] + c["loaded_tokens"] == expect[name], name
        assert r["cached_tokens"] == expect[name], name
        assert r["tokens"] == world["ref"][name]["tokens"], f"{name}: bf16 tier hit changed greedy tokens"


def test_captured_trace_replays_to_the_hits_the_connector_measured(world):
    from tiered_kv.connectors.parity import parity

    report = parity(world["capture"], "lru")
    assert report["requests"] == 5
    assert report["measured"] == [0, 6 * BS, 0, 0, 9 * BS]  # what the engine saw (test above)
    assert report["identical"], report


def _sent_one_by_one(eng: EngineProcess, steps: list, prompts: dict[str, list[int]]) -> list[int]:
    """Send each ``(prompt name, traffic class)`` as its own request (a number: a pause in seconds);
    the tier's hit tokens of each request."""
    hits = []
    for step in steps:
        if isinstance(step, (int, float)):
            time.sleep(step)
            continue
        name, cls = step
        (r,) = eng.generate([prompts[name]], max_tokens=1, traffic_class=cls)
        hits.append(r["connector"]["hit_tokens"])
    return hits


def _blocks_and_tail(rng: random.Random, *blocks: list[int]) -> list[int]:
    """Whole blocks, then 10 more tokens (so every full block can be loaded)."""
    return [t for b in blocks for t in b] + [rng.randrange(1, 1000) for _ in range(10)]


def _ttl_run(model: Path, root: Path) -> tuple[list[int], str]:
    """Engine T (the test below says what it checks): the tier's hits and the captured trace."""
    rng = random.Random(2525)
    block = lambda: [rng.randrange(1, 1000) for _ in range(BS)]  # noqa: E731
    shared = [block(), block()]
    prompts = {"A": _blocks_and_tail(rng, block(), block()), "C": _blocks_and_tail(rng, block(), block()),
               "G": _blocks_and_tail(rng, *shared, block()), "H": _blocks_and_tail(rng, *shared, block())}
    steps = [("A", "agent"), ("A", "agent"), ("C", "chatbot"), ("G", "agent"), ("H", "chatbot"), 7.0,
             ("A", "agent"), ("C", "chatbot"), ("G", "agent"), ("H", "chatbot")]
    capture = str(root / "ttl.jsonl")
    with EngineProcess(log=root / "T.log") as eng:
        eng.start(model=str(model), store=str(root / "store"), prefix_caching=False, capture=capture,
                  ttl={"agent": 3, "chatbot": 60}, gc_each_request=True)
        return _sent_one_by_one(eng, steps, prompts), capture


#: The connector's capacity for engine C: 6.45 chunks of ~33.1 kB (32 KiB of bf16 KV + header).
CAPACITY_BYTES = 213_750


def _capacity_run(model: Path, root: Path) -> tuple[list[int], str, Path]:
    """Engine C (the test below says what it checks): hits, the captured trace, the store."""
    rng = random.Random(2526)
    block = lambda: [rng.randrange(1, 1000) for _ in range(BS)]  # noqa: E731
    prefix = [block(), block()]
    prompts = {"X": _blocks_and_tail(rng, *prefix, block()), "Y": _blocks_and_tail(rng, *prefix, block()),
               "Z": _blocks_and_tail(rng, block(), block())}
    steps = [(name, "default") for name in ("X", "Y", "Z", "X", "Y", "Z")]
    capture, store = str(root / "capacity.jsonl"), root / "store"
    with EngineProcess(log=root / "C.log") as eng:
        eng.start(model=str(model), store=str(store), prefix_caching=False, capture=capture,
                  capacity_bytes=CAPACITY_BYTES, gc_each_request=True)
        return _sent_one_by_one(eng, steps, prompts), capture, store


@pytest.fixture(scope="module")
def replays(tiny_model, tmp_path_factory) -> dict[str, tuple]:
    """Engines T and C, side by side, each on a store of its own."""
    ttl, capacity = _two_at_a_time(lambda: _ttl_run(tiny_model, tmp_path_factory.mktemp("T")),
                                   lambda: _capacity_run(tiny_model, tmp_path_factory.mktemp("C")))
    return {"T": ttl, "C": capacity}


def test_per_class_ttls_replay_to_the_hits_the_connector_measured(replays):
    """Agent chunks live 3 s, chatbot chunks 60 s; the tier's GC runs before each lookup.

    Re-sends come within one request (well under 3 s) or after a 7 s pause (well past 3 s, far
    from 60 s), so wall-clock jitter cannot move a request across a TTL. A shared prefix stored
    by an agent request and then hit by a chatbot one outlives the agent TTL (the chatbot touch
    keeps it) while the agent's own tail after it expires. The chatbot touches the shared prefix
    last before the pause: the order in which the simulator's ``ttl`` (TTL of the last toucher)
    and the tier (longest TTL among the touchers) agree (connectors/parity.py).
    """
    from tiered_kv.connectors.parity import parity, predicted_hits

    hits, capture = replays["T"]
    # after the pause: A expired (agent), C kept (chatbot), G keeps the chatbot-held prefix only
    assert hits == [0, 2 * BS, 0, 0, 2 * BS, 0, 2 * BS, 2 * BS, 3 * BS]
    report = parity(capture, "ttl", ttl_seconds={"agent": 3.0, "chatbot": 60.0})
    assert report["measured"] == hits and report["identical"], report
    assert predicted_hits(capture, "lru").tolist() != hits  # without the TTLs the prediction differs


def test_a_finite_capacity_replays_to_the_hits_the_connector_measured(replays):
    """A capacity of 5 chunks under the tier's watermark GC, modelled by ``lru-trie``.

    The GC evicts from above 90 % of ``CAPACITY_BYTES`` down to 80 %: with chunks of ~33.1 kB
    that is 5 chunks kept after every GC and 6 always evicting, so it is a capacity of 5 blocks
    (:func:`~tiered_kv.connectors.parity.trie_capacity_tokens` checks it on the chunk sizes the
    store holds). X and Y share a 2-block prefix P; Z is unrelated. Z's insert evicts X's tail
    (the oldest leaf, not P, which Y refreshed): X comes back to a partial hit of P; later
    re-sends find their tails evicted the same way.
    """
    from tiered_kv.connectors.parity import parity, predicted_hits, trie_capacity_tokens

    hits, capture, store = replays["C"]
    sizes = [p.stat().st_size for p in (store / "chunks").glob("*/*") if len(p.name) == 32]  # chunks/<h>/<key-hex>
    assert len(sizes) == 5  # P, Y's tail and Z: what the last GC kept
    # a header's JSON varies by a few bytes with the chunk's creation time: allow 16 either side
    capacity_tokens = trie_capacity_tokens(CAPACITY_BYTES, (min(sizes) - 16, max(sizes) + 16), BS)
    assert capacity_tokens == 5 * BS
    # without the capacity: [0, 2, 0, 3, 3, 2] blocks
    assert hits == [0, 2 * BS, 0, 2 * BS, 2 * BS, 1 * BS]
    report = parity(capture, "lru-trie", capacity_tokens=capacity_tokens)
    assert report["measured"] == hits and report["identical"], report
    assert predicted_hits(capture, "lru").tolist() != hits
    print(f"block LRU at the same 5 blocks would predict "
          f"{predicted_hits(capture, 'lru', capacity_tokens=capacity_tokens).tolist()}")


def _partials(store: str) -> list[Path]:
    return [p for p in Path(store).rglob("*") if ".partial" in p.name]


def _chunks_at(store: str, index: int) -> list[Path]:
    """Chunk files of the store whose header says block ``index`` (read with the codec, no engine)."""
    from tiered_kv import codec

    out = []
    for path in (Path(store) / "chunks").rglob("*"):
        if path.is_file() and ".partial" not in path.name:
            try:
                if codec.read_header(path.read_bytes()[:codec.HEADER_PROBE]).index == index:
                    out.append(path)
            except (codec.CorruptChunk, ValueError):
                continue
    return out


def _verify(store: str) -> subprocess.CompletedProcess:
    cli = Path(sys.executable).parent / "tiered-kv"
    return subprocess.run([str(cli), "store", "verify", store, "--json"], capture_output=True, text=True)


def test_a_kill_mid_save_leaves_no_chunk_that_loads_and_a_corrupt_chunk_is_a_miss(world):
    rng = random.Random(7)
    victim = [rng.randrange(1, 1000) for _ in range(4000)]
    full = len(victim) // BS
    eng = EngineProcess(log=world["root"] / "K.log")
    eng.start(model=world["model"], store=world["store"], prefix_caching=False)
    eng.proc.stdin.write(json.dumps({"cmd": "generate", "prompts": [victim], "max_tokens": 1}) + "\n")
    eng.proc.stdin.flush()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not _partials(world["store"]) and eng.proc.poll() is None:
        time.sleep(0.001)
    eng.kill()
    verify = _verify(world["store"])
    assert verify.returncode == 0 and json.loads(verify.stdout)["corrupt"] == [], verify.stdout + verify.stderr
    with EngineProcess(log=world["root"] / "B2.log") as fresh:
        fresh.start(model=world["model"], store=world["store"], prefix_caching=False)
        (after_kill,) = fresh.generate([victim], max_tokens=3)  # what survived the kill, then the rest stored
        (complete,) = fresh.generate([victim], max_tokens=3)
        broken = _chunks_at(world["store"], 100)
        assert len(broken) == 1  # only the victim has 101+ blocks
        raw = bytearray(broken[0].read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        broken[0].write_bytes(bytes(raw))
        (corrupted,) = fresh.generate([victim], max_tokens=3)
    print(f"after the kill {after_kill['connector']['hit_tokens']} of {full * BS} tokens were stored")
    assert after_kill["connector"]["hit_tokens"] % BS == 0
    assert complete["connector"]["hit_tokens"] == full * BS
    assert corrupted["connector"]["hit_tokens"] == 100 * BS  # the corrupt chunk and everything after: a miss
    assert after_kill["tokens"] == complete["tokens"] == corrupted["tokens"]


FP4 = ("mxfp4", "nvfp4")


@pytest.fixture(scope="module")
def fp4_runs(world) -> dict[str, tuple[dict, dict, str]]:
    """Engines F, one per format side by side: (a miss, then a tier hit, of the long prompt; the store)."""
    prompt = world["prompts"]["long"]

    def run(fmt: str) -> tuple[dict, dict, str]:
        store = str(world["root"] / f"store-{fmt}")
        with EngineProcess(log=world["root"] / f"F-{fmt}.log") as eng:
            eng.start(model=world["model"], store=store, fmt=fmt, prefix_caching=False)
            miss, hit = eng.generate([prompt, prompt], max_tokens=1, logprobs=20, traffic_class="agent")
        return miss, hit, store

    return dict(zip(FP4, _two_at_a_time(*[lambda fmt=fmt: run(fmt) for fmt in FP4]), strict=True))


@pytest.mark.parametrize("fmt", FP4)
def test_fp4_first_token_logits_stay_close_to_bf16(fp4_runs, world, fmt):
    ref = world["ref"]["long"]["first_logprobs"]
    miss, hit, store = fp4_runs[fmt]
    assert miss["connector"]["hit_tokens"] == 0 and hit["connector"]["loaded_tokens"] == 21 * BS
    # the request's class (kv_transfer_params) is the class of the chunks it stored
    assert hit["connector"]["traffic_class"] == "agent"
    stats = subprocess.run([str(Path(sys.executable).parent / "tiered-kv"), "store", "stats",
                            store, "--json"], capture_output=True, text=True)
    by_class = json.loads(stats.stdout)["by_class"]
    assert set(by_class) == {"agent"} and by_class["agent"]["chunks"] == 21, by_class
    common = sorted(set(ref) & set(hit["first_logprobs"]))
    assert len(common) >= 10
    diff = np.abs(np.array([hit["first_logprobs"][t] - ref[t] for t in common]))
    miss_diff = np.abs(np.array([miss["first_logprobs"][t] - ref[t] for t in common if t in miss["first_logprobs"]]))
    print(f"{fmt} tier hit: max |dlogprob| over the top-{len(common)} tokens = {diff.max():.4f} "
          f"(a miss: {miss_diff.max():.4f})")
    assert diff.max() < 0.5
    assert miss_diff.max() < 1e-2  # the miss computes in bf16 like the reference
    assert diff.max() > miss_diff.max()  # FP4 does change the KV: the comparison can see it


_ENGINE_CHECKS = """
import torch, vllm, vllm._custom_ops as ops
from tiered_kv.connectors import vllm as connector
from tiered_kv.connectors.cpu_layout import probe_layout
torch.manual_seed(0)
for isa in ("vec", "vec16", "amx"):
    for bs, dim in ((32, 64), (96, 128), (512, 64)):
        try:
            layout = probe_layout(ops.cpu_attn_reshape_and_cache, isa, bs, dim)
        except RuntimeError as exc:  # vLLM refuses an ISA this CPU lacks (amx without AMX)
            if "Unsupported CPU attention configuration" not in str(exc):
                raise
            print("LAYOUT", isa, bs, dim, "unsupported", flush=True)
            continue
        n, heads = 3, 2
        k, v = torch.randn(n * bs, heads, dim).bfloat16(), torch.randn(n * bs, heads, dim).bfloat16()
        slots = torch.randperm(n * bs)  # token i goes to slot slots[i]
        cache = torch.zeros(n, heads, bs, 2 * dim, dtype=torch.bfloat16)
        key_cache, value_cache = cache.view(n, heads, 2 * bs, dim).chunk(2, dim=2)
        ops.cpu_attn_reshape_and_cache(k, v, key_cache, value_cache, slots, isa)
        kv = layout.unpack(cache)  # [n, heads, 2, bs, dim]
        order = torch.argsort(slots)  # the token at each slot
        k_ref = k[order].view(n, bs, heads, dim).permute(0, 2, 1, 3)
        v_ref = v[order].view(n, bs, heads, dim).permute(0, 2, 1, 3)
        ok = torch.equal(kv[:, :, 0], k_ref) and torch.equal(kv[:, :, 1], v_ref) and torch.equal(layout.pack(kv), cache)
        print("LAYOUT", isa, bs, dim, ok, flush=True)
vllm.__version__ = "0.1.0"
try:
    connector._check_platform()
except RuntimeError as exc:
    print("VERSION", exc, flush=True)
"""


@pytest.fixture(scope="module")
def engine_checks() -> subprocess.CompletedProcess:
    """One engine-venv process (one vLLM import) for the checks that need vLLM but no engine."""
    _engine_or_skip()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    return subprocess.run([str(engine_python()), "-c", _ENGINE_CHECKS], capture_output=True, text=True, env=env,
                          timeout=600)


def test_tile_unpacking_matches_vllms_own_packing_op_for_every_cpu_isa(engine_checks):
    """Every ISA this CPU runs: vec and vec16 run on any x86 CPU; vLLM refuses amx on a CPU
    without AMX, and only there may its probes be left out."""
    assert engine_checks.returncode == 0, engine_checks.stderr[-2000:]
    lines = [line.split() for line in engine_checks.stdout.splitlines() if line.startswith("LAYOUT ")]
    assert len(lines) == 9, engine_checks.stdout
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    for _, isa, *_shape, result in lines:
        allowed = {"True", "unsupported"} if isa == "amx" and "amx_bf16" not in flags else {"True"}
        assert result in allowed, engine_checks.stdout


def test_an_unsupported_vllm_version_is_one_line_naming_make_engine(engine_checks):
    assert ("VERSION TieredKVConnector: vLLM 0.1.0 is not supported (supported: ['0.32.0']); install one with "
            "`make engine`") in engine_checks.stdout, engine_checks.stdout + engine_checks.stderr[-1500:]
