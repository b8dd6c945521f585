"""KV tensor <-> one self-describing FP4 chunk object.

A chunk is the global KV of one full block of tokens, ``kv: [tokens, 2, kv_heads, head_dim]``
(K and V stacked on dim 1), quantized by :mod:`tiered_kv.kernels.fp4` and laid out as::

    prefix   68 bytes  magic b"TKVC", version u16, reserved u16, header_len u32, payload_len u64,
                       key, parent key, namespace digest (16 bytes each)
    header   JSON      key, parent key, block index, namespace digest, format, shapes, valid
                       tokens, traffic class, creation time, and one entry per payload section
                       (name, dtype, shape, byte count)
    payload  bytes     packed FP4 codes, then block scales, then the per-chunk global scale
    trailer  4 bytes   CRC32C (little-endian) of everything before it

Why one object and not one Zarr array per chunk: creating an array costs a metadata write and
a directory per chunk, which held a naive layout to a fraction of raw file throughput. One object per
chunk is one ``store.set`` (one file on a LocalStore), and the header makes it decodable with
nothing else at hand: ``tiered-kv store stats/verify/gc`` need no namespace to work.

The checksum is CRC32C (google-crc32c, a dependency of zarr; hardware-accelerated), so that
every read can be verified: the tier must catch torn writes and flipped bits, not tampering, and
a cryptographic hash such as blake2b would cost many times more per chunk for nothing it needs.
The CRC sits in a trailer because CRC32C of (message + its own CRC) is the constant 0x48674BC7:
a reader checks the whole object as returned by the store, with no slicing copy. Key, parent
and namespace sit in the binary prefix so that the read path (:func:`check_chunk`) validates a
chunk with one struct unpack and one CRC, and parses the JSON header only when asked.
The length fields catch truncation, the CRC catches flipped bytes, and a parse failure of the
header catches the rest: any of them turns the chunk into a miss (:class:`CorruptChunk`).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import google_crc32c
import numpy as np

if TYPE_CHECKING:
    import torch

    from tiered_kv.keys import Namespace

MAGIC = b"TKVC"
VERSION = 1
PREFIX = struct.Struct("<4sHHIQ16s16s16s")
TRAILER = 4
#: CRC32C of any message followed by its own CRC32C (little-endian).
CRC_RESIDUE = 0x48674BC7
#: Bytes worth reading to parse a header without the payload (headers are ~0.5 KB).
HEADER_PROBE = 2048
KV_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class RawBlock:
    """One unquantized block (``bf16``/``fp32`` namespaces: an ablation without FP4).

    The same fields the chunk writer reads from an ``FP4Tensor`` (``data``, ``scales``,
    ``global_scale``, ``fmt``, ``shape``, ``dtype``, ``block``), so raw chunks use the same
    header, checksum and crash-safety as FP4 ones.
    """

    data: Any  # torch.Tensor [bs, 2, H, D] in the raw dtype
    fmt: str
    dtype: Any  # dtype the KV had before storage
    scales: Any = None
    global_scale: None = None
    block: int = 1

    @property
    def shape(self):
        return self.data.shape


def raw_dtype(fmt: str):
    """The torch dtype an unquantized ablation format stores (``"bf16"``, ``"fp32"``); public
    because the engine applies the same cast to the KV it keeps on the GPU."""
    import torch

    return {"bf16": torch.bfloat16, "fp32": torch.float32}[fmt]


class CorruptChunk(ValueError):
    """A chunk object that does not decode: truncated, flipped bytes, bad header, wrong key."""


@dataclass(frozen=True)
class ChunkHeader:
    """Everything about a chunk except its payload bytes."""

    key: bytes
    parent: bytes
    index: int
    ns_digest: bytes
    fmt: str
    tokens: int
    kv_heads: int
    head_dim: int
    traffic_class: str
    created: float
    sections: tuple[tuple[str, str, tuple[int, ...], int], ...]
    header_len: int
    payload_len: int
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def nbytes(self) -> int:
        """Size of the whole stored object."""
        return PREFIX.size + self.header_len + self.payload_len + TRAILER


def check_kv(kv: torch.Tensor, namespace: Namespace) -> None:
    """Raise a ValueError naming ``kv`` when it does not fit the namespace."""
    import torch

    if not isinstance(kv, torch.Tensor):
        raise ValueError(f"kv: must be a torch.Tensor [tokens, 2, kv_heads, head_dim], got {type(kv).__name__}")
    want = namespace.kv_shape
    if kv.dim() != 4 or tuple(kv.shape[1:]) != want:
        raise ValueError(
            f"kv: must have shape [tokens, {want[0]}, {want[1]}, {want[2]}] "
            f"(K and V stacked on dim 1, kv_heads={want[1]}, head_dim={want[2]} for this namespace), "
            f"got {list(kv.shape)}"
        )
    dtype = str(kv.dtype).removeprefix("torch.")
    if dtype not in KV_DTYPES:
        raise ValueError(f"kv: dtype must be one of {list(KV_DTYPES)}, got {dtype}")


def quantize_blocks(kv: torch.Tensor, namespace: Namespace) -> list:
    """FP4-quantize ``kv [n * block_size, 2, H, D]`` into one FP4Tensor per block, in one call.

    A chunk's bytes must depend only on its own block (the same key must always mean the same
    bytes, whatever was put beside it). MXFP4 scales are block-local already. NVFP4's global
    scale is per head over the whole input, so the blocks are first folded into the head axis
    (``[bs, 2, n * H, D]``): one kernel call then yields one global scale per chunk *and* head.
    """
    check_kv(kv, namespace)
    import torch

    from tiered_kv.kernels import fp4

    bs, H, D = namespace.block_size, namespace.kv_heads, namespace.head_dim
    n = kv.shape[0] // bs
    if n * bs != kv.shape[0]:
        raise ValueError(f"kv: token count {kv.shape[0]} is not a multiple of block_size={bs}")
    if n == 0:
        return []
    shape = torch.Size((bs, 2, H, D))
    if namespace.fmt in ("bf16", "fp32"):
        raw = kv.detach().to(raw_dtype(namespace.fmt)).contiguous()
        empty = torch.zeros(0, dtype=torch.uint8)
        return [RawBlock(raw[i * bs:(i + 1) * bs], namespace.fmt, kv.dtype, empty) for i in range(n)]
    if namespace.fmt == "nvfp4":
        folded = kv.reshape(n, bs, 2, H, D).permute(1, 2, 0, 3, 4).reshape(bs, 2, n * H, D)
        q = fp4.quantize(folded.contiguous(), "nvfp4")
        data = q.data.reshape(bs, 2, n, H, D // 2).permute(2, 0, 1, 3, 4)
        scales = q.scales.reshape(bs, 2, n, H, -1).permute(2, 0, 1, 3, 4)
        gs = q.global_scale.reshape(n, H)
        return [fp4.FP4Tensor(data[i].contiguous(), scales[i].contiguous(), gs[i].contiguous(),
                              "nvfp4", shape, kv.dtype) for i in range(n)]
    q = fp4.quantize(kv.contiguous(), namespace.fmt)
    return [fp4.FP4Tensor(q.data[i * bs:(i + 1) * bs], q.scales[i * bs:(i + 1) * bs], None,
                          namespace.fmt, shape, kv.dtype) for i in range(n)]


def _np(t) -> np.ndarray:
    import torch

    if isinstance(t, torch.Tensor):
        t = t.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:  # numpy has no bf16: keep the raw 16-bit patterns
            t = t.view(torch.int16)
        return t.numpy()
    return np.ascontiguousarray(t)


def pack_chunk(q, *, namespace: Namespace, key: bytes, parent: bytes, index: int,
               traffic_class: str, created: float) -> bytes:
    """Serialize an FP4-quantized block into one chunk object (see the module docstring)."""
    secs = [("data", _np(q.data)), ("scales", _np(q.scales))]
    if q.global_scale is not None:
        secs.append(("global_scale", _np(q.global_scale).astype("<f4", copy=False)))
    header = {
        "index": int(index),
        "fmt": namespace.fmt,
        "tokens": int(q.shape[0]),
        "kv_heads": namespace.kv_heads,
        "head_dim": namespace.head_dim,
        "class": traffic_class,
        "created": float(created),
        "fp4": {"block": int(q.block), "input_dtype": str(q.dtype).removeprefix("torch."),
                "global_scale": "per chunk and head" if len(secs) > 2 else "none"},
        "sections": [[n, a.dtype.str, list(a.shape), a.nbytes] for n, a in secs],
    }
    hbytes = json.dumps(header, separators=(",", ":")).encode()
    parts = [a.tobytes() for _, a in secs]
    prefix = PREFIX.pack(MAGIC, VERSION, 0, len(hbytes), sum(len(p) for p in parts), key, parent,
                         namespace.digest)
    crc = google_crc32c.value(prefix)
    for part in (hbytes, *parts):  # CRC part by part, then one join: the payload is copied once
        crc = google_crc32c.extend(crc, part)
    return b"".join((prefix, hbytes, *parts, crc.to_bytes(TRAILER, "little")))


def read_header(buf: bytes | memoryview) -> ChunkHeader:
    """Parse the prefix and JSON header (``buf`` may be just the first HEADER_PROBE bytes)."""
    mv = memoryview(buf)
    if len(mv) < PREFIX.size:
        raise CorruptChunk(f"truncated: {len(mv)} bytes, shorter than the {PREFIX.size}-byte prefix")
    magic, version, _, hlen, plen, key, parent, ns = PREFIX.unpack_from(mv)
    if magic != MAGIC:
        raise CorruptChunk(f"bad magic {bytes(magic)!r}")
    if version != VERSION:
        raise CorruptChunk(f"unsupported chunk version {version}")
    if len(mv) < PREFIX.size + hlen:
        raise CorruptChunk("truncated header")
    try:
        h = json.loads(bytes(mv[PREFIX.size:PREFIX.size + hlen]))
        header = ChunkHeader(
            key=bytes(key), parent=bytes(parent), index=int(h["index"]),
            ns_digest=bytes(ns), fmt=str(h["fmt"]), tokens=int(h["tokens"]),
            kv_heads=int(h["kv_heads"]), head_dim=int(h["head_dim"]), traffic_class=str(h["class"]),
            created=float(h["created"]), header_len=hlen, payload_len=plen, extra={"fp4": h.get("fp4", {})},
            sections=tuple((s[0], s[1], tuple(int(x) for x in s[2]), int(s[3])) for s in h["sections"]),
        )
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise CorruptChunk(f"unreadable header: {exc}") from exc
    if sum(s[3] for s in header.sections) != plen:
        raise CorruptChunk("section sizes do not add up to the payload length")
    return header


def check_chunk(buf: bytes, *, key: bytes | None = None, ns_digest: bytes | None = None) -> None:
    """Fast read-path check of a whole chunk: lengths, CRC32C, key and namespace (no JSON).

    ``buf`` must be ``bytes`` (google-crc32c reads only immutable buffers; the stores' buffers
    wrap ``bytes`` already, see :func:`tiered_kv.tiers.ssd.layout.as_bytes`).
    """
    if len(buf) < PREFIX.size + TRAILER:
        raise CorruptChunk(f"truncated: {len(buf)} bytes")
    magic, version, _, hlen, plen, k, _, ns = PREFIX.unpack_from(buf)
    if magic != MAGIC:
        raise CorruptChunk(f"bad magic {bytes(magic)!r}")
    if len(buf) != PREFIX.size + hlen + plen + TRAILER:
        raise CorruptChunk(f"size {len(buf)} bytes, prefix says {PREFIX.size + hlen + plen + TRAILER}")
    if google_crc32c.value(buf) != CRC_RESIDUE:
        raise CorruptChunk("checksum mismatch")
    if version != VERSION:
        raise CorruptChunk(f"unsupported chunk version {version}")
    if key is not None and k != key:
        raise CorruptChunk(f"chunk holds key {k.hex()}, expected {key.hex()}")
    if ns_digest is not None and ns != ns_digest:
        raise CorruptChunk("chunk belongs to another namespace")


def verify_chunk(buf: bytes, *, key: bytes | None = None) -> ChunkHeader:
    """Header of a complete, intact chunk; raises CorruptChunk otherwise."""
    check_chunk(buf, key=key)
    return read_header(buf)


def payload_arrays(buf: bytes | memoryview, header: ChunkHeader) -> dict[str, np.ndarray]:
    """Zero-copy numpy views of a verified chunk's payload sections."""
    mv = memoryview(buf)
    off = PREFIX.size + header.header_len
    out = {}
    for name, dtype, shape, nbytes in header.sections:
        out[name] = np.frombuffer(mv[off:off + nbytes], dtype=np.dtype(dtype)).reshape(shape)
        off += nbytes
    return out


def unpack_chunk(buf: bytes | memoryview, header: ChunkHeader, *, device: str = "cpu"):
    """Rebuild the kernels' FP4Tensor from a verified chunk."""
    import torch

    from tiered_kv.kernels import fp4

    arrs = payload_arrays(buf, header)
    in_dtype = getattr(torch, header.extra.get("fp4", {}).get("input_dtype", "float32"), torch.float32)
    shape = torch.Size((header.tokens, 2, header.kv_heads, header.head_dim))
    data = torch.from_numpy(arrs["data"].copy())
    if header.fmt in ("bf16", "fp32"):
        data = data.view(torch.bfloat16) if header.fmt == "bf16" else data  # stored as its int16 bits
        return RawBlock(data.reshape(shape).to(device), header.fmt, in_dtype,
                        torch.zeros(0, dtype=torch.uint8))
    scales = torch.from_numpy(arrs["scales"].copy()).to(device)
    gs = arrs.get("global_scale")
    gs = None if gs is None else torch.from_numpy(gs.astype(np.float32)).to(device)
    return fp4.FP4Tensor(data.to(device), scales, gs, header.fmt, shape, in_dtype)


def dequantize_chunks(chunks: list, dtype: torch.dtype) -> torch.Tensor:
    """Dequantized KV of consecutive chunks, ``[n * tokens, 2, H, D]``, in one kernel call.

    NVFP4 chunks carry their own per-head global scale, so they are folded into the head axis
    (the inverse of :func:`quantize_blocks`) to keep one scale per chunk and head.
    """
    import torch

    from tiered_kv.kernels import fp4

    if not chunks:
        raise ValueError("dequantize_chunks: no chunks")
    n = len(chunks)
    bs, two, H, D = chunks[0].shape
    fmt = chunks[0].fmt
    if fmt in ("bf16", "fp32"):
        return torch.cat([q.data for q in chunks]).to(dtype)
    if fmt == "nvfp4":
        data = torch.stack([q.data for q in chunks]).permute(1, 2, 0, 3, 4).reshape(bs, two, n * H, D // 2)
        scales = torch.stack([q.scales for q in chunks]).permute(1, 2, 0, 3, 4).reshape(bs, two, n * H, -1)
        gs = torch.cat([q.global_scale.reshape(H) for q in chunks])
        q = fp4.FP4Tensor(data.contiguous(), scales.contiguous(), gs, fmt, torch.Size((bs, two, n * H, D)),
                          chunks[0].dtype)
        out = fp4.dequantize(q, dtype).reshape(bs, two, n, H, D).permute(2, 0, 1, 3, 4)
        return out.reshape(n * bs, two, H, D).contiguous()
    q = fp4.FP4Tensor(torch.cat([q.data for q in chunks]), torch.cat([q.scales for q in chunks]), None, fmt,
                      torch.Size((n * bs, two, H, D)), chunks[0].dtype)
    return fp4.dequantize(q, dtype)
