"""A binary min-heap over parallel arrays, for the numba kernels: keys ``(k1, k2)``, payload ``hv``.

Why one heap for the kernels that evict lazily (frequency family, Belady, the trie replay, the
queue simulator's write-backs): lazy deletion needs nothing more (push a new entry when an item's
key changes, skip a popped entry that no longer matches). A push equal to an entry stays below
it, but the heap is not stable: the pop order among equal ``(k1, k2)`` is otherwise unspecified, so each caller keeps the keys of its live entries
distinct (a sequence number, a node id, a next-use position) and results never depend on it. A
kernel that wants the largest first negates its keys. The caller sizes the arrays for every push
it can make and reads the top at index 0 before popping. (``belady.stack_pass`` keeps its own
position-indexed heap: it moves entries by position, which this one cannot.)

numba's on-disk cache does not see edits to a called function in another file: after changing
this module, clear the ``__pycache__`` numba files (or ``NUMBA_CACHE_DIR``) of its callers.
"""

from __future__ import annotations

from numba import njit


@njit(cache=True)
def heap_push(k1, k2, hv, n, a, b, v):  # pragma: no cover - compiled
    """Push (a, b) -> v into the min-heap of size n; returns the new size."""
    j = n
    while j > 0:
        parent = (j - 1) >> 1
        if k1[parent] < a or (k1[parent] == a and k2[parent] <= b):
            break
        k1[j] = k1[parent]
        k2[j] = k2[parent]
        hv[j] = hv[parent]
        j = parent
    k1[j] = a
    k2[j] = b
    hv[j] = v
    return n + 1


@njit(cache=True)
def heap_pop(k1, k2, hv, n):  # pragma: no cover - compiled
    """Remove the top (read it from index 0 first); returns the new size."""
    n -= 1
    a = k1[n]
    b = k2[n]
    v = hv[n]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= n:
            break
        if c + 1 < n and (k1[c + 1] < k1[c] or (k1[c + 1] == k1[c] and k2[c + 1] < k2[c])):
            c += 1
        if a < k1[c] or (a == k1[c] and b <= k2[c]):
            break
        k1[j] = k1[c]
        k2[j] = k2[c]
        hv[j] = hv[c]
        j = c
    if n > 0:
        k1[j] = a
        k2[j] = b
        hv[j] = v
    return n
