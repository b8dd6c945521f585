"""The SSD tier writes the same objects, byte for byte, as the code that created the golden file.

``tests/data/ssd_golden.json`` holds every object (chunks, access records, group documents) a
fixed sequence of puts and lookups wrote into a local directory, made by :func:`write_store`
before the tier was reorganised into one backend interface. Chunks are the stored format other
processes and older stores read, so a refactor of the tier must not change a byte of them. The
KV is built from integers and powers of two, so the FP4 bytes do not depend on the machine's
floating-point library. Regenerate (only for an intended format change) with
``python tests/test_ssd_golden.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from tiered_kv import codec
from tiered_kv.keys import Namespace

GOLDEN = Path(__file__).parent / "data" / "ssd_golden.json"


class _Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000.0

    def __call__(self) -> float:
        self.t += 1.5
        return self.t


def _kv(n: int, seed: int) -> torch.Tensor:
    """Exact, machine-independent KV: small integers over 37 times a power of two per token."""
    idx = torch.arange(n * 2 * 2 * 32, dtype=torch.int64)
    vals = ((idx * (7919 + seed)) % 2001 - 1000).to(torch.float32) / 37.0
    scale = torch.pow(2.0, (torch.arange(n) % 9 - 4).to(torch.float32))
    return vals.reshape(n, 2, 2, 32) * scale[:, None, None, None]


def _tier(root: Path, fmt: str, clock):
    from tiered_kv.tiers.ssd import SSDConfig, SSDTier

    ns = Namespace(model="golden", fmt=fmt, block_size=8, kv_heads=2, head_dim=32)
    return SSDTier(root, namespace=ns, clock=clock, ttl={"agent": "3d"}, traffic_classes=("agent", "chatbot"),
                   config=SSDConfig(background_touch=False))


def write_store(root: Path) -> dict[str, str]:
    """Puts, a quantized put, lookups and touches in three formats; every object written, as hex."""
    clock = _Clock()
    for fmt in ("mxfp4", "nvfp4", "bf16"):
        with _tier(root, fmt, clock) as t:
            toks = torch.arange(40) * 3 + 5
            t.put(toks[:24], _kv(24, 0), "agent")
            t.put(toks, _kv(40, 0)[16:], "chatbot", kv_offset=16)
            other = torch.arange(100, 132)
            if fmt == "bf16":
                t.put(other[:24], _kv(24, 1), "agent")
            else:
                chunks = codec.quantize_blocks(_kv(32, 1), t.namespace)[1:3]
                t.put_quantized(other, chunks, "agent", first_block=1)
                t.put(other[:8], _kv(8, 1), "agent")
            assert t.get_prefix(toks, "agent").blocks == 5
            assert t.get_prefix(other).blocks == 3
            t.touch(toks[:16], "chatbot")
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = Path(dirpath, name)
            rel = path.relative_to(root).as_posix()
            if not rel.startswith("usage/"):
                out[rel] = path.read_bytes().hex()
    return dict(sorted(out.items()))


def _root_doc(hex_doc: str) -> dict:
    """The root group document without its pointers to source files (which may move)."""
    doc = json.loads(bytes.fromhex(hex_doc))
    for name in ("docs", "usage_key"):
        doc["attributes"]["tiered_kv"].pop(name)
    return doc


def test_objects_match_the_golden_file(tmp_path):
    golden = json.loads(GOLDEN.read_text())
    written = write_store(tmp_path)
    assert sorted(written) == sorted(golden)
    assert _root_doc(written.pop("zarr.json")) == _root_doc(golden.pop("zarr.json"))
    assert len(golden) == 36 and sum(p.startswith("chunks/") for p in golden) == 24
    different = [p for p in golden if written[p] != golden[p]]
    assert not different, f"{len(different)} objects differ, first {different[:3]}"


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(write_store(Path(d)), indent=0) + "\n")
        print(f"wrote {GOLDEN}")
