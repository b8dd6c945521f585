"""The engine connector's inputs and records, checked without starting an engine (main venv).

Bad input gets one line naming what to do: no engine venv, an unknown or out-of-range connector
setting, an unreachable bucket; two models or two tile layouts never share a namespace; the
tile layout's pack/unpack are inverse permutations; the recorded benchmark page is the one its
JSON renders to.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tiered_kv.connectors.blocks import engine_namespace, gather_blocks, scatter_blocks
from tiered_kv.connectors.client import EngineUnavailable, engine_python
from tiered_kv.connectors.cpu_layout import TileLayout
from tiered_kv.connectors.settings import ConnectorSettings, open_tier
from tiered_kv.keys import Namespace

ROOT = Path(__file__).resolve().parent.parent


def _vec_layout(bs: int = 32, dim: int = 64) -> TileLayout:
    """The rule of vLLM's "vec" ISA written out: K transposed ([dim, bs]), then V ([bs, dim])."""
    t, d = torch.meshgrid(torch.arange(bs), torch.arange(dim), indexing="ij")
    k_index = (d * bs + t).reshape(-1)
    v_index = (bs * dim + t * dim + d).reshape(-1)
    return TileLayout(isa="vec", block_size=bs, head_size=dim, k_index=k_index, v_index=v_index)


def test_a_missing_engine_venv_names_the_command(monkeypatch, tmp_path):
    monkeypatch.setenv("TIERED_KV_ENGINE_PYTHON", str(tmp_path / "nope" / "python"))
    with pytest.raises(EngineUnavailable, match=r"run `make engine`"):
        engine_python()


@pytest.mark.parametrize(("extra", "message"), [
    ({"store": "/x", "fromat": "bf16"}, r"unknown key\(s\) \['fromat'\]; known keys"),
    ({"fmt": "bf16"}, r"\['store'\]: missing"),
    ({"store": "/x", "fmt": "fp8"}, r"\['fmt'\]: must be one of \['bf16', 'mxfp4', 'nvfp4'\], got 'fp8'"),
    ({"store": "/x", "traffic_class": "agent", "traffic_classes": ["chatbot"]}, r"not one of the declared"),
])
def test_connector_settings_reject_bad_input_in_one_line(extra, message):
    with pytest.raises(ValueError, match=message) as info:
        ConnectorSettings.from_extra_config(extra)
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_an_unreachable_bucket_is_one_line_naming_the_store(monkeypatch):
    for key, value in {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "test",
                       "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    ns = Namespace(model="m", fmt="bf16", block_size=32, kv_heads=4, head_dim=64)
    with pytest.raises(RuntimeError, match=r"cannot open 's3://no-such-bucket/kv'.*credentials") as info:
        open_tier(ConnectorSettings(store="s3://no-such-bucket/kv"), ns)
    assert "\n" not in str(info.value)


def test_two_models_or_two_layouts_never_share_a_namespace(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, width in ((a, 256), (b, 512)):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"hidden_size": width}))
    vec = _vec_layout()
    other = TileLayout(isa="amx", block_size=32, head_size=64, k_index=vec.v_index - 32 * 64,
                       v_index=vec.k_index + 32 * 64)
    spaces = [engine_namespace(model=str(m), layout=lay, layers=2, kv_heads=2, fmt="bf16")
              for m in (a, b) for lay in (vec, other)]
    assert len({ns.digest for ns in spaces}) == 4
    assert engine_namespace(model=str(a), layout=vec, layers=2, kv_heads=2, fmt="bf16").digest == spaces[0].digest


def test_tile_layout_is_a_checked_permutation_and_blocks_round_trip():
    layout = _vec_layout()
    caches = [torch.randn(5, 2, 32, 128).bfloat16() for _ in range(3)]  # 3 layers, 2 KV heads
    kv = gather_blocks(caches, layout, [4, 1])
    assert kv.shape == (64, 2, 6, 64)
    # K of layer 1, head 0, token 3 of engine block 4: column 3 of the transposed K tile
    assert torch.equal(kv[3, 0, 2], caches[1][4, 0].reshape(-1)[: 32 * 64].reshape(64, 32)[:, 3])
    fresh = [torch.zeros_like(c) for c in caches]
    scatter_blocks(fresh, layout, [0, 2], kv)
    for c, f in zip(caches, fresh, strict=True):
        assert torch.equal(f[0], c[4]) and torch.equal(f[2], c[1])
    with pytest.raises(ValueError, match="not a permutation"):
        TileLayout(isa="vec", block_size=32, head_size=64, k_index=layout.k_index, v_index=layout.k_index)


def test_the_recorded_engine_run_held_parity_request_by_request():
    """The page itself is checked with every other record (tests/test_bench_record.py)."""
    record = ROOT / "benchmarks" / "results" / "engine.json"
    if not record.exists():
        pytest.skip("no recorded bench engine run (tiered-kv bench record engine FILE)")
    s = json.loads(record.read_text())["mooncake_slice"]
    assert s["identical_per_request"] and s["measured_hit_tokens"] == s["predicted_hit_tokens"]


def test_a_store_of_another_model_or_layout_is_named_in_one_line(tmp_path):
    from tiered_kv.connectors.blocks import foreign_namespaces

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config.json").write_text("{}")
    vec = _vec_layout()
    ours = engine_namespace(model=str(tmp_path / "a"), layout=vec, layers=2, kv_heads=2, fmt="bf16")
    theirs = engine_namespace(model=str(tmp_path / "a"), layout=vec, layers=2, kv_heads=2, fmt="mxfp4")
    store = str(tmp_path / "store")
    assert foreign_namespaces(store, ours) is None  # no store yet
    open_tier(ConnectorSettings(store=store), theirs).close()
    line = foreign_namespaces(store, ours)
    assert line is not None and "\n" not in line
    assert "1 other model(s)/layout(s)" in line and "mxfp4" in line and "a new store directory" in line
    open_tier(ConnectorSettings(store=store), ours).close()
    assert foreign_namespaces(store, ours) is None  # this engine's own namespace is there now


def test_the_engine_worker_answers_every_line_and_ends_on_stop():
    """``serve(stdin, stdout)`` without vLLM: an unknown command or a line that is not JSON gets an
    error reply (the client raises it), never a crash; ``stop`` is answered and ends the loop."""
    import io

    from tiered_kv.connectors.engine_worker import REPLY, serve

    out = io.StringIO()
    assert serve(io.StringIO('{"cmd": "warp"}\n\nnot json\n{"cmd": "stop"}\n{"cmd": "warp"}\n'), out) == 0
    replies = [json.loads(line.removeprefix(REPLY)) for line in out.getvalue().splitlines()]
    assert replies[0] == {"ok": False, "error": "unknown command 'warp'"}
    assert not replies[1]["ok"] and replies[1]["error"].startswith("JSONDecodeError")
    assert replies[2:] == [{"ok": True}]


def test_the_tours_knobs_reach_the_engine_and_its_work_folder(tmp_path, monkeypatch):
    """``EngineTour(workdir, fmt=, document_tokens=, block_size=)`` and ``close(remove=)``, with a
    stand-in for the engine process (the real one: tests/test_engine_vllm.py, notebook 08)."""
    from tiered_kv.connectors import tour as T

    specs, sent = [], []

    class Engine:
        def __init__(self, *, log):
            self.log = log

        def start(self, **spec):
            specs.append(spec)
            return 0.5

        def generate(self, prompts):
            sent.extend(len(p) for p in prompts)
            return [{"cached_tokens": 0, "connector": {"hit_tokens": 0, "loaded_tokens": 0}, "seconds": 0.01}
                    for _ in prompts]

        def close(self):
            pass

    def build_model(path):
        path.mkdir(parents=True)
        return path

    monkeypatch.setattr(T, "EngineProcess", Engine)
    monkeypatch.setattr(T, "build_model", build_model)
    work = tmp_path / "tour"
    tour = T.EngineTour(work, fmt="mxfp4", document_tokens=96, block_size=16)
    tour.start()
    assert specs == [{"model": str(work / "model"), "store": str(work / "store"), "fmt": "mxfp4", "block_size": 16}]
    assert tour.engine.log == work / "engine1.log" and sent == [8]  # the warm-up: half a block, nothing stored
    assert tour.send("document", "unrelated")["prompt_tokens"].to_list() == [96, 48]
    tour.close(remove=False)
    assert work.is_dir()
    tour.close()
    assert not work.exists()
