"""Chunk codec: bit-exact FP4 round trip, self-describing header, every kind of damage detected."""

import struct

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiered_kv.kernels import fp4

from tiered_kv import codec
from tiered_kv.keys import Namespace

NS = {f: Namespace(model="m", fmt=f, block_size=16, kv_heads=3, head_dim=64) for f in ("mxfp4", "nvfp4")}


def _kv(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 2, 3, 64, generator=g) * torch.logspace(-3, 3, n)[:, None, None, None]


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4"])
def test_batched_quantize_equals_per_block_quantize(fmt):
    kv = _kv(64)
    qs = codec.quantize_blocks(kv, NS[fmt])
    assert len(qs) == 4
    for i, q in enumerate(qs):
        ref = fp4.quantize(kv[16 * i:16 * (i + 1)].contiguous(), fmt)
        assert torch.equal(q.data, ref.data) and torch.equal(q.scales, ref.scales)
        if fmt == "nvfp4":
            assert q.global_scale.shape == (3,) and torch.equal(q.global_scale, ref.global_scale)
    out = codec.dequantize_chunks(qs, torch.float32)
    ref = torch.cat([fp4.dequantize(fp4.quantize(kv[16 * i:16 * (i + 1)].contiguous(), fmt)) for i in range(4)])
    assert torch.equal(out, ref)


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4"])
def test_pack_unpack_round_trip(fmt):
    ns = NS[fmt]
    (q,) = codec.quantize_blocks(_kv(16).to(torch.bfloat16), ns)
    blob = codec.pack_chunk(q, namespace=ns, key=b"k" * 16, parent=b"p" * 16, index=3,
                            traffic_class="agent", created=123.5)
    h = codec.verify_chunk(blob, key=b"k" * 16)
    assert (h.index, h.traffic_class, h.created, h.fmt, h.tokens) == (3, "agent", 123.5, fmt, 16)
    assert h.nbytes == len(blob) and h.payload_len == q.nbytes
    assert h.ns_digest == ns.digest and h.parent == b"p" * 16
    back = codec.unpack_chunk(blob, h)
    assert back.dtype == torch.bfloat16 and tuple(back.shape) == (16, 2, 3, 64)
    assert torch.equal(fp4.dequantize(back), fp4.dequantize(q))
    # the header alone (first bytes) parses without the payload
    assert codec.read_header(blob[:codec.HEADER_PROBE]) == h


def test_bytes_per_token_matches_the_format():
    ns = Namespace(model="m", fmt="mxfp4", block_size=256, kv_heads=2, head_dim=64)
    (q,) = codec.quantize_blocks(torch.randn(256, 2, 2, 64), ns)
    assert q.nbytes / 256 == 2 * 2 * 64 * (0.5 + 1 / 32) == 136


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_any_single_byte_flip_or_truncation_is_detected(data):
    ns = NS["nvfp4"]
    (q,) = codec.quantize_blocks(_kv(16, seed=1), ns)
    blob = bytearray(codec.pack_chunk(q, namespace=ns, key=b"k" * 16, parent=bytes(16), index=0,
                                      traffic_class="c", created=0.0))
    if data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] ^= data.draw(st.integers(1, 255))
    else:
        blob = blob[:data.draw(st.integers(0, len(blob) - 1))]
    with pytest.raises(codec.CorruptChunk):
        codec.verify_chunk(bytes(blob), key=b"k" * 16)


def test_wrong_key_and_bad_magic():
    ns = NS["mxfp4"]
    (q,) = codec.quantize_blocks(_kv(16), ns)
    blob = codec.pack_chunk(q, namespace=ns, key=b"k" * 16, parent=bytes(16), index=0, traffic_class="c", created=0)
    with pytest.raises(codec.CorruptChunk, match="expected"):
        codec.verify_chunk(blob, key=b"x" * 16)
    with pytest.raises(codec.CorruptChunk, match="magic"):
        codec.read_header(b"ZZZZ" + blob[4:])
    assert struct.unpack_from("<4s", blob)[0] == codec.MAGIC


def test_check_kv_errors_name_the_argument():
    ns = NS["mxfp4"]
    with pytest.raises(ValueError, match=r"kv: must have shape \[tokens, 2, 3, 64\]"):
        codec.check_kv(torch.zeros(16, 3, 64), ns)
    with pytest.raises(ValueError, match="kv: dtype"):
        codec.check_kv(torch.zeros(16, 2, 3, 64, dtype=torch.float64), ns)
    with pytest.raises(ValueError, match="multiple of block_size"):
        codec.quantize_blocks(torch.zeros(17, 2, 3, 64), ns)
