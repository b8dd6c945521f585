"""The numba min-heap the kernels share: what it pops, and its push tie rule."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_kv.sim.heap import heap_pop, heap_push

ops = st.lists(st.one_of(st.tuples(st.integers(-3, 3), st.integers(-3, 3)), st.none()), max_size=60)


@settings(max_examples=200, deadline=None)
@given(ops=ops, floats=st.booleans())
def test_pops_come_out_in_key_order_and_nothing_is_lost(ops, floats):
    """Any mix of pushes (an op with keys) and pops (None) against a sorted list as reference: each
    pop returns a smallest (k1, k2) still held, with the payload pushed with it."""
    n = len(ops) + 1
    k1 = np.empty(n, np.float64 if floats else np.int64)
    k2, hv = np.empty(n, np.int64), np.empty(n, np.int64)
    size, held = 0, []
    for i, op in enumerate(ops):
        if op is not None:
            size = heap_push(k1, k2, hv, size, op[0], op[1], i)
            held.append((op[0], op[1], i))
        elif size:
            top = (k1[0], k2[0], hv[0])
            size = heap_pop(k1, k2, hv, size)
            smallest = min(held)[:2]
            assert top[:2] == smallest and top in held  # payload travelled with its keys
            held.remove(top)
        assert size == len(held)
    rest = []
    while size:
        rest.append((k1[0], k2[0], hv[0]))
        size = heap_pop(k1, k2, hv, size)
    assert [r[:2] for r in rest] == sorted(h[:2] for h in held) and sorted(rest) == sorted(held)


def test_a_push_equal_to_the_top_stays_below_it():
    """Equal keys keep the entry already in the heap on top (pop order among equals is otherwise
    unspecified, so callers keep their live keys distinct)."""
    k1, k2, hv = (np.empty(4, np.int64) for _ in range(3))
    size = heap_push(k1, k2, hv, 0, 5, 1, 100)
    size = heap_push(k1, k2, hv, size, 5, 1, 200)
    assert (k1[0], k2[0], hv[0]) == (5, 1, 100) and size == 2
