"""Token blocks -> chained prefix keys.

A cached prefix is only reusable when it matches *exactly from the first token*, so every block
key hashes its parent key together with its own tokens: ``key_i = H(key_{i-1}, block_i, ns)``.
A key therefore stands for the block *and everything before it* (Mooncake's ``hash_ids`` use
the same convention), and a lookup walks the chain from block 0 until the first miss.

The namespace folds in everything that makes two caches' bytes incompatible: the model
fingerprint, the KV format (MXFP4 / NVFP4), the block size and the KV shape. Two namespaces
never share a key, so a store can hold several models without confusion.

Hashes are blake2b from :mod:`hashlib` (stable across processes and machines), never Python's
salted ``hash()``. Only *full* blocks get keys: a partial tail block is never stored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

KEY_BYTES = 16
_ROOT = bytes(KEY_BYTES)
_MASK63 = (1 << 63) - 1


#: The FP4 chunk formats, each with its scale block: elements of the last axis that share one
#: scale (MXFP4 32, as OCP MX v1.0; NVFP4 16). Defined here, torch-free, because a namespace's
#: format sets its head_dim rule; :mod:`tiered_kv.kernels.fp4` quantizes them and reads these.
BLOCK = {"mxfp4": 32, "nvfp4": 16}
FORMATS = tuple(BLOCK)
#: The FP4 format wherever none is named (the SSD tier's, the replay grid's, the sizes' default).
DEFAULT_FORMAT = "mxfp4"
#: Unquantized chunk formats, for ablations (the global KV stored as it was computed).
RAW_FORMATS = ("bf16", "fp32")


def bytes_per_element(fmt: str) -> float:
    """Nominal FP4 storage per element: 0.5 byte of E2M1 plus one scale byte per block.

    Excludes NVFP4's per-head FP32 global scale (4 bytes per head per chunk), which
    ``FP4Tensor.nbytes`` does count.
    """
    check_fp4_format(fmt)
    return 0.5 + 1.0 / BLOCK[fmt]


def check_fp4_format(fmt: str) -> None:
    """Refuse a name that is not one of :data:`FORMATS`, listing them."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown FP4 format {fmt!r}; allowed: {', '.join(FORMATS)}")


@dataclass(frozen=True, kw_only=True)
class Namespace:
    """What must agree for two chunks of KV bytes to be interchangeable.

    ``model`` is a fingerprint of the weights (a name plus a checkpoint hash, say); ``fmt`` the
    FP4 format; ``block_size`` tokens per chunk; ``kv_heads`` x ``head_dim`` the shape of one
    token's K (and V).
    """

    model: str
    fmt: str
    block_size: int = 256
    kv_heads: int
    head_dim: int

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"Namespace.model: must be a non-empty string, got {self.model!r}")
        formats = FORMATS + RAW_FORMATS
        if self.fmt not in formats:
            raise ValueError(f"Namespace.fmt: must be one of {list(formats)}, got {self.fmt!r}")
        for name in ("block_size", "kv_heads", "head_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"Namespace.{name}: must be an integer >= 1, got {value!r}")
        block = 1 if self.fmt in RAW_FORMATS else int(BLOCK[self.fmt])  # elements per FP4 scale
        if self.head_dim % block:
            raise ValueError(
                f"Namespace.head_dim: must be a multiple of {block} (one {self.fmt} scale block), got {self.head_dim}"
            )

    @cached_property
    def digest(self) -> bytes:
        """16-byte fingerprint of every field; part of every key and every chunk header."""
        text = f"tiered-kv/ns/v1|{self.model}|{self.fmt}|{self.block_size}|{self.kv_heads}|{self.head_dim}"
        return hashlib.blake2b(text.encode(), digest_size=KEY_BYTES).digest()

    @property
    def kv_shape(self) -> tuple[int, int, int]:
        """Shape of one token's global KV: (2, kv_heads, head_dim), K and V stacked."""
        return (2, self.kv_heads, self.head_dim)


def as_token_array(tokens, *, name: str = "tokens") -> np.ndarray:
    """A 1-D int64 numpy view of a list, numpy array or 1-D tensor of token ids."""
    if hasattr(tokens, "detach") and hasattr(tokens, "cpu"):  # torch.Tensor without importing torch
        tokens = tokens.detach().cpu().numpy()
    arr = np.asarray(tokens)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.ndim != 1:
        raise ValueError(f"{name}: must be 1-D (one sequence of token ids), got shape {tuple(arr.shape)}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name}: must hold integer token ids, got dtype {arr.dtype}")
    if arr.dtype.kind == "i" and arr.min() < 0:
        raise ValueError(f"{name}: token ids must be >= 0, got {int(arr.min())}")
    return arr.astype("<i8", copy=False)


def block_keys(tokens, namespace: Namespace) -> list[bytes]:
    """Chained 16-byte keys of every *full* block of ``tokens`` (a partial tail gets none)."""
    arr = as_token_array(tokens)
    bs = namespace.block_size
    ns = namespace.digest
    keys: list[bytes] = []
    parent = _ROOT
    n = len(arr) // bs
    data = memoryview(arr[:n * bs].tobytes())  # one copy; blocks are zero-copy slices of it
    step = bs * 8
    blake2b = hashlib.blake2b
    for i in range(n):
        h = blake2b(parent, digest_size=KEY_BYTES)
        h.update(ns)
        h.update(data[i * step:(i + 1) * step])
        parent = h.digest()
        keys.append(parent)
    return keys


def key_hex(key: bytes) -> str:
    """Hex form of a key, as used in store paths (hashes only: never a user string)."""
    if not isinstance(key, (bytes, bytearray)) or len(key) != KEY_BYTES:
        raise ValueError(f"key: must be {KEY_BYTES} bytes, got {key!r}")
    return bytes(key).hex()


def key_id(key: bytes) -> int:
    """A 16-byte tier key as the 63-bit integer block id of a trace (an engine's capture)."""
    return int.from_bytes(key[:8], "little") & _MASK63


def _encode_block(block) -> bytes:
    if isinstance(block, (int, np.integer)):
        return b"i" + int(block).to_bytes(16, "little", signed=True)
    return b"t" + as_token_array(block, name="block").tobytes()


def chain_ids(blocks: Iterable[Sequence[int] | int], salt: bytes = b"") -> list[int]:
    """Namespace-free chained 63-bit ids for a sequence of blocks.

    Each element of ``blocks`` is either the token ids of one block or an opaque per-block id
    (an int). The result ``id_i`` depends on blocks 0..i, like a key. Ids are non-negative and
    below 2**63 so they fit both int64 and uint64 columns. ``salt`` separates id spaces (for
    example two tenants, or two models in a simulated cluster).
    """
    if not isinstance(salt, (bytes, bytearray)):
        raise ValueError(f"salt: must be bytes, got {type(salt).__name__}")
    out: list[int] = []
    parent = bytes(8)
    for block in blocks:
        h = hashlib.blake2b(parent, digest_size=8, person=b"tkv-chain")
        h.update(salt)
        h.update(_encode_block(block))
        parent = h.digest()
        out.append(int.from_bytes(parent, "little") & _MASK63)
    return out
