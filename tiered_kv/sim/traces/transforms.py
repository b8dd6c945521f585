"""Transforms of a trace frame that model a change of prompt layout.

:func:`insert_volatile_block`: a per-call line (a timestamp, a request id) rendered into the
prompt at token depth ``d`` of a fraction ``f`` of the requests. Block ids are chained (equal id
<=> equal whole prefix), so the block holding the line and every block after it become unique
to the request: placed above the stable system prompt and tool definitions (d = 0) it destroys
every prefix hit; placed at the end of the prompt it costs one block.
"""

from __future__ import annotations

import numpy as np
import polars as pl


def insert_volatile_block(df: pl.DataFrame, depth_tokens, fraction: float = 1.0, seed: int = 0, *,
                          mask=None) -> pl.DataFrame:
    """Insert one unique block at token depth ``depth_tokens`` into a fraction of the requests.

    ``depth_tokens``: a number or one per request (``math.inf`` or anything past the prompt: the
    end of the prompt, after the last full block); it is rounded down to a block boundary. The requests changed are drawn
    with probability ``fraction`` from ``numpy.random.default_rng(seed)``, or given by the
    boolean ``mask``. In a changed request, blocks before the depth keep their ids, then come
    the inserted block and fresh ids for every later block (chained ids: the prefix differs
    from there on); its input length grows by one block. Other requests are unchanged.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction: must be in [0, 1], got {fraction!r}")
    n = df.height
    if mask is None:
        mask = np.random.default_rng(seed).random(n) < fraction
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != (n,):
        raise ValueError(f"mask: must have one boolean per request ({n}), got shape {mask.shape}")
    depth = np.broadcast_to(np.asarray(depth_tokens, dtype=np.float64), (n,))
    if np.any(np.isnan(depth)) or np.any(depth < 0):
        raise ValueError("depth_tokens: must be >= 0 tokens (inf: the end of the prompt)")
    bs = df["block_size"].cast(pl.Int64).to_numpy()
    nb = df["block_ids"].list.len().cast(pl.Int64).to_numpy()
    flat = df["block_ids"].explode().to_numpy().astype(np.uint64) if nb.sum() else np.zeros(0, np.uint64)
    full = df["input_length"].cast(pl.Int64).to_numpy() // bs  # a line past the end lands in the last partial block
    k = np.minimum(np.floor(np.minimum(depth, 2.0**62) / bs), np.minimum(full, nb)).astype(np.int64)
    new_nb = nb + mask
    old_start = np.cumsum(nb) - nb
    new_start = np.cumsum(new_nb) - new_nb
    req = np.repeat(np.arange(n, dtype=np.int64), new_nb)
    pos = np.arange(int(new_nb.sum()), dtype=np.int64) - new_start[req]
    keep = ~mask[req] | (pos < k[req])
    out = np.empty(len(req), dtype=np.uint64)
    out[keep] = flat[old_start[req[keep]] + pos[keep]]
    base = int(flat.max()) + 1 if len(flat) else 0
    n_fresh = int((~keep).sum())
    if base + n_fresh >= 2**64:
        raise ValueError("insert_volatile_block: no room for fresh block ids above the trace's largest")
    out[~keep] = np.uint64(base) + np.arange(n_fresh, dtype=np.uint64)
    ids = (pl.DataFrame({"r": pl.Series(req).set_sorted(), "block_ids": out})
           .group_by("r", maintain_order=True).agg("block_ids"))
    column = (pl.DataFrame({"r": np.arange(n, dtype=np.int64)}).join(ids, on="r", how="left")["block_ids"]
              .fill_null(pl.lit([], dtype=pl.List(pl.UInt64))))
    return df.with_columns(column.cast(pl.List(pl.UInt64)).alias("block_ids"),
                           (pl.col("input_length") + pl.Series(np.where(mask, bs, 0))).alias("input_length"))
