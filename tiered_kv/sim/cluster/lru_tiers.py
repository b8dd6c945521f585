"""Numba kernels for the cluster model: many LRU caches over one shared slot pool.

A *tier* here is K independent LRU caches (one per machine, or one shared) whose entries are
dense block ids. All K live in one set of arrays so that the cluster loop stays a single
compiled function:

* a slot pool (``sk`` key, ``prv``/``nxt`` list links): partition k owns slots
  ``[base[k], base[k] + cap[k])`` and two sentinels (head = MRU side, tail = LRU side);
* an open-addressing hash table (linear probing, backward-shift deletion) from the composite
  key ``id * K + k`` to its slot, so a touch is O(1);
* a membership bit mask per block id (bit k set <=> block in cache k), which makes "is this
  block on machine m" one load and lets cache-aware routing intersect all machines at once.

Entries have equal size (a block, or one window state), so capacity is a count of entries.
A tier with one cache (the shared SSD pool) skips the hash table: its node of block ``id`` is
``id`` itself (the pool is sized to the trace's distinct blocks), which avoids a random probe
per access.

Numba's on-disk cache keys a compiled function on its own file only: after editing this file,
also touch ``model.py`` so that ``model._run`` (which inlines these kernels) recompiles.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_GOLDEN = np.uint64(11400714819323198485)


def new_tier(parts: int, capacity_per_part: int, universe: int) -> tuple:
    """Arrays of a tier with ``parts`` LRU caches of ``capacity_per_part`` entries each."""
    if not 1 <= parts <= 64:
        raise ValueError(f"tier: parts must be in [1, 64], got {parts}")
    cap = np.full(parts, max(int(capacity_per_part), 0), dtype=np.int64)
    direct = parts == 1
    total = universe if direct else int(cap.sum())
    base = np.concatenate([[0], np.cumsum(cap)[:-1]]).astype(np.int64)
    bits = 4 if direct else max(4, int(np.ceil(np.log2(max(2 * total, 2)))) + 1)
    table_keys = np.full(1 << bits, -1, dtype=np.int64)
    table_vals = np.zeros(1 << bits, dtype=np.int64)
    nodes = total + 2 * parts
    sk = np.full(nodes, -1, dtype=np.int64)
    prv = np.zeros(nodes, dtype=np.int64)
    nxt = np.zeros(nodes, dtype=np.int64)
    for k in range(parts):
        head, tail = total + 2 * k, total + 2 * k + 1
        nxt[head], prv[tail] = tail, head
        prv[head], nxt[tail] = head, tail
    used = np.zeros(parts, dtype=np.int64)
    mask = np.zeros(universe, dtype=np.uint64)
    evictions = np.zeros(parts, dtype=np.int64)
    last_touch = np.zeros(universe, dtype=np.float64)
    return (table_keys, table_vals, np.int64(bits), sk, prv, nxt, base, cap, used, mask,
            evictions, np.int64(parts), np.int64(total), last_touch)


@njit(cache=True, inline="always")
def _home(key, bits):
    return np.int64((np.uint64(key) * _GOLDEN) >> np.uint64(64 - bits))


@njit(cache=True, inline="always")
def _find(tk, key, bits):
    m = tk.size - 1
    i = _home(key, bits)
    while True:
        k = tk[i]
        if k == key:
            return i
        if k == -1:
            return -1
        i = (i + 1) & m


@njit(cache=True, inline="always")
def _insert(tk, tv, key, val, bits):
    m = tk.size - 1
    i = _home(key, bits)
    while tk[i] != -1:
        i = (i + 1) & m
    tk[i] = key
    tv[i] = val


@njit(cache=True, inline="always")
def _delete(tk, tv, i, bits):
    m = tk.size - 1
    j = i
    while True:
        j = (j + 1) & m
        if tk[j] == -1:
            break
        h = _home(tk[j], bits)
        # keep tk[j] where it is when its home lies cyclically in (i, j]
        if i <= j:
            if i < h <= j:
                continue
        elif h > i or h <= j:
            continue
        tk[i] = tk[j]
        tv[i] = tv[j]
        i = j
    tk[i] = -1


@njit(cache=True, inline="always")
def _unlink(prv, nxt, s):
    p, n = prv[s], nxt[s]
    nxt[p] = n
    prv[n] = p


@njit(cache=True, inline="always")
def _push_front(prv, nxt, head, s):
    first = nxt[head]
    nxt[head] = s
    prv[s] = head
    nxt[s] = first
    prv[first] = s


@njit(cache=True, _nrt=False)
def touch_arrays(tk, tv, bits, sk, prv, nxt, base, cap, used, mask, ev, parts, total, last, k, ident, now):
    """Touch block ``ident`` in cache ``k`` (insert at MRU, evicting the LRU entry when full);
    return the evicted block id, or -1.

    Takes the tier's arrays one by one: callers unpack the tier tuple once, outside their loop
    (numba pays a reference-count update per array on every unpack). The evicted entry's
    last-touch time stays readable in ``last`` (idle age at eviction) until it is touched again.
    """
    bit = np.uint64(1) << np.uint64(k)
    head = total + 2 * k
    direct = parts == 1
    key = ident * parts + k
    if mask[ident] & bit:
        s = ident if direct else tv[_find(tk, key, bits)]
        _unlink(prv, nxt, s)
        _push_front(prv, nxt, head, s)
        if direct:
            last[ident] = now
        return -1
    if cap[k] == 0:
        return -1
    victim = -1
    if used[k] < cap[k]:
        s = ident if direct else base[k] + used[k]
        used[k] += 1
    else:
        s = prv[head + 1]
        _unlink(prv, nxt, s)
        if direct:
            victim = s
            s = ident
        else:
            old = sk[s]
            _delete(tk, tv, _find(tk, old, bits), bits)
            victim = old // parts
        mask[victim] &= ~bit
        ev[k] += 1
    if not direct:
        sk[s] = key
        _insert(tk, tv, key, s, bits)
    _push_front(prv, nxt, head, s)
    mask[ident] |= bit
    if direct:
        last[ident] = now
    return victim

