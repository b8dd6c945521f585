"""Chained prefix keys: exact-prefix semantics, namespace separation, stability."""

import hashlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_kv.keys import KEY_BYTES, Namespace, block_keys, chain_ids, key_hex

NS = Namespace(model="tiny-v1", fmt="mxfp4", block_size=4, kv_heads=2, head_dim=64)


def test_only_full_blocks_get_keys():
    assert len(block_keys(list(range(11)), NS)) == 2
    assert block_keys(list(range(3)), NS) == []
    assert block_keys([], NS) == []


def test_keys_match_a_brute_force_chain():
    toks = np.arange(12, dtype=np.int64) * 7
    parent = bytes(KEY_BYTES)
    expected = []
    for i in range(3):
        h = hashlib.blake2b(parent + NS.digest + toks[4 * i:4 * i + 4].astype("<i8").tobytes(),
                            digest_size=KEY_BYTES)
        parent = h.digest()
        expected.append(parent)
    assert block_keys(toks, NS) == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 50_000), min_size=0, max_size=40),
       st.lists(st.integers(0, 50_000), min_size=0, max_size=40))
def test_shared_keys_are_exactly_the_shared_full_block_prefix(a, b):
    ka, kb = block_keys(a, NS), block_keys(b, NS)
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    shared = 0
    while shared < min(len(ka), len(kb)) and ka[shared] == kb[shared]:
        shared += 1
    assert shared == min(common // 4, len(ka), len(kb))
    # a key never appears at another position of the other chain (a key fixes the whole prefix)
    assert not (set(ka[shared:]) & set(kb))


def test_input_types_agree():
    toks = [5, 6, 7, 8, 9, 10, 11, 12]
    ref = block_keys(toks, NS)
    assert block_keys(np.array(toks, dtype=np.int32), NS) == ref
    assert block_keys(torch.tensor(toks), NS) == ref


def test_namespace_fields_all_change_keys():
    toks = list(range(8))
    variants = [
        Namespace(model="tiny-v2", fmt="mxfp4", block_size=4, kv_heads=2, head_dim=64),
        Namespace(model="tiny-v1", fmt="nvfp4", block_size=4, kv_heads=2, head_dim=64),
        Namespace(model="tiny-v1", fmt="mxfp4", block_size=4, kv_heads=4, head_dim=64),
        Namespace(model="tiny-v1", fmt="mxfp4", block_size=4, kv_heads=2, head_dim=128),
    ]
    ref = block_keys(toks, NS)
    for ns in variants:
        assert not set(block_keys(toks, ns)) & set(ref)
    assert len({ns.digest for ns in variants + [NS]}) == 5


@pytest.mark.parametrize("kwargs, setting", [
    (dict(fmt="fp8"), "fmt"),
    (dict(block_size=0), "block_size"),
    (dict(kv_heads=-1), "kv_heads"),
    (dict(model=""), "model"),
])
def test_bad_namespace_names_the_setting(kwargs, setting):
    base = dict(model="m", fmt="mxfp4", block_size=4, kv_heads=2, head_dim=64)
    with pytest.raises(ValueError, match=setting):
        Namespace(**{**base, **kwargs})


def test_bad_tokens():
    with pytest.raises(ValueError, match="tokens"):
        block_keys(np.zeros((2, 4), dtype=np.int64), NS)
    with pytest.raises(ValueError, match="integer"):
        block_keys([0.5, 1.5, 2.5, 3.5], NS)


def test_key_hex_is_hex_only():
    h = key_hex(block_keys(list(range(4)), NS)[0])
    assert len(h) == 32 and set(h) <= set("0123456789abcdef")
    with pytest.raises(ValueError):
        key_hex(b"short")


def test_chain_ids_are_chained_stable_and_fit_int64():
    a = chain_ids([[1, 2], [3, 4], [5, 6]])
    b = chain_ids([[1, 2], [3, 4], [9, 9]])
    assert a[:2] == b[:2] and a[2] != b[2]
    assert chain_ids([[9, 9], [3, 4]])[1] != a[1]  # same block, different parent
    assert all(0 <= x < 2**63 for x in a)
    assert chain_ids([10, 11]) == chain_ids([10, 11])
    assert chain_ids([10, 11], salt=b"x") != chain_ids([10, 11])
    assert np.array(chain_ids(range(100)), dtype=np.int64).shape == (100,)
