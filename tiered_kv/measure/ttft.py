"""Time to first token of real prefills through the engine, on this machine, with real tiers.

For each prompt length N (held-out stdlib text), four cases, each a real prefill through
:class:`tiered_kv.engine.Engine`:

- ``miss``: empty SSD and host tiers; the encoder runs over all N tokens.
- ``ssd_cold_hit``: a previous turn of N - ``suffix`` tokens was prefilled by *another* engine
  sharing the SSD tier; this machine's host tier is empty, so the encoder windows are rebuilt
  by bounded replay of R tokens, and only the new tokens go through the encoder. Just before
  it, every file of the store is dropped from the page cache with
  ``posix_fadvise(POSIX_FADV_DONTNEED)`` (per file, no root needed; on tmpfs nothing can be
  dropped and the read stays warm).
- ``ssd_warm_hit``: the same with the chunks in the page cache (read once, untimed, before).
- ``ssd_host_hit``: the machine that served the previous turn: its host tier holds the encoder
  windows at the prefix boundary (no replay) and, with ``reuse_decoder_windows`` on, the exact
  decoder windows, so the decoder continues from them over the new tokens instead of
  replaying R.

Repeats are interleaved (repeat 1 of every length and case, then repeat 2, ...; the case order
rotates between repeats), so the cases of one repeat run one after the other and can be paired.
``tiered-kv bench ttft`` records this; figure 02 draws it live.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass

from tiered_kv.keys import DEFAULT_FORMAT
from tiered_kv.measure import load_model

LENGTHS = (1024, 4096, 16384, 32768)
CASES = ("miss", "ssd_cold_hit", "ssd_warm_hit", "ssd_host_hit")


def _engines(model, store_root: str, ns, name: str):
    from tiered_kv.engine import Engine
    from tiered_kv.tiers.host import HostTier
    from tiered_kv.tiers.ssd import SSDConfig, SSDTier

    ssd = SSDTier(f"{store_root}/{name}", namespace=ns, config=SSDConfig(background_touch=False))
    return ssd, Engine(model, ssd, HostTier("4GiB", name=f"{name}-a"), reuse_decoder_windows=True,
                       name=f"{name}-a"), \
        Engine(model, ssd, HostTier("4GiB", name=f"{name}-b"), name=f"{name}-b")


def drop_page_cache(root: str) -> int:
    """Ask the kernel to drop every file under ``root`` from the page cache; returns files done."""
    done = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            try:
                fd = os.open(os.path.join(dirpath, f), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)  # dirty pages cannot be dropped
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                done += 1
            finally:
                os.close(fd)
    return done


def filesystem_of(path: str) -> str:
    """The file-system type of ``path`` from /proc/mounts (longest mount point prefix)."""
    best, kind = "", "unknown"
    with contextlib.suppress(OSError), open("/proc/mounts") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 3 and os.path.realpath(path).startswith(parts[1]) and len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    return kind


@dataclass
class _Length:
    """One prompt length's engines: a cold one for the miss, and the two machines of the hit
    (``a`` served the previous turn and holds its host tier; ``b`` shares only the SSD tier)."""

    root: str
    prompt: object
    fresh: object
    ssd: object
    a: object
    b: object

    def prefill(self, case: str):
        """One timed prefill of ``case``; nothing is stored, so each case sees exactly the
        previous turn's cached state."""
        if case == "miss":
            return self.fresh.prefill(self.prompt, store=False)
        if case == "ssd_cold_hit":
            drop_page_cache(self.root)
            return self.b.prefill(self.prompt, store=False)
        if case == "ssd_warm_hit":
            self.ssd.get_prefix(self.prompt)  # untimed read: the chunks are in the page cache
            return self.b.prefill(self.prompt, store=False)
        return self.a.prefill(self.prompt, store=False)


def _length(model, tokens, root: str, ns, n: int, suffix: int, tag: str) -> _Length:
    prompt = tokens[:n]
    _, fresh, _ = _engines(model, root, ns, f"miss-{tag}")
    ssd, a, b = _engines(model, root, ns, f"hit-{tag}")
    a.prefill(prompt[: n - suffix])  # the previous turn, served by machine a (not timed)
    return _Length(root, prompt, fresh, ssd, a, b)


def _row(res, n: int, case: str, rep: int) -> dict:
    from tiered_kv.engine import STAGES

    row = {"length_tokens": n, "case": case, "repeat": rep, "ttft_ms": res.ttft_s * 1e3,
           "ssd_hit_tokens": res.hit_tokens["ssd"], "host_hit_tokens": res.hit_tokens["host"],
           "encoder_tokens": res.computed_tokens["encoder_suffix"],
           "encoder_replay_tokens": res.computed_tokens["encoder_replay"],
           "decoder_tokens": res.computed_tokens["decoder"], "store_ms": res.store_s * 1e3,
           "decoder_from_host": bool(res.decoder_from_host)}
    row.update({f"{s}_ms": res.timings_s.get(s, 0.0) * 1e3 for s in STAGES})
    return row


def _prompt_tokens(tokens, need: int):
    import torch

    if tokens is None:
        from tiered_kv.bounded_replay_error import load_heldout

        tokens = load_heldout()
    tokens = torch.as_tensor(tokens).long()
    return tokens.repeat(need // tokens.numel() + 1) if tokens.numel() < need else tokens


def measure_ttft(lengths=LENGTHS, *, model=None, repeats: int = 5, suffix: int = 64,
                 block_size: int = 256, fmt: str = DEFAULT_FORMAT, tokens=None, progress: bool = True,
                 store_dir: str | None = None, raw: bool = False):
    """Measured TTFT per (length, case): a polars frame of medians with ``ttft_ms_q1``/``_q3``.

    ``model`` defaults to the trained checkpoint; ``tokens`` to held-out stdlib text. Small
    lengths (say 256, 512) with the ``tiny`` preset make this a CI-sized measurement. ``raw``
    returns every repeat instead of the medians.
    """
    import polars as pl

    from tiered_kv.engine import namespace_for

    if model is None:
        model, _ = load_model()
    lengths = [int(n) for n in lengths]
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats: must be an integer >= 1, got {repeats!r}")
    for n in lengths:
        if n <= suffix or n > model.cfg.max_seq_len:
            raise ValueError(f"lengths: each must be in ({suffix}, {model.cfg.max_seq_len}] tokens, got {n}")
    tokens = _prompt_tokens(tokens, max(lengths))
    ns = namespace_for(model, fmt=fmt, block_size=block_size)
    rows, jobs = [], [(rep, n) for rep in range(repeats) for n in lengths]
    if progress:
        from tqdm.auto import tqdm

        jobs = tqdm(jobs, desc="ttft", unit="length")
    with tempfile.TemporaryDirectory(prefix="tkv-ttft-", dir=store_dir) as root:
        # Warm-up: every code path once at the smallest length (allocators, lazy kernels); not kept.
        warm = _length(model, tokens, root, ns, min(lengths), suffix, "warm")
        for case in CASES:
            warm.prefill(case)
        setups: dict[int, _Length] = {}
        for rep, n in jobs:
            if n not in setups:
                setups[n] = _length(model, tokens, root, ns, n, suffix, str(n))
            for case in CASES[rep % len(CASES):] + CASES[:rep % len(CASES)]:  # the order rotates
                rows.append(_row(setups[n].prefill(case), n, case, rep))
    df = pl.DataFrame(rows)
    return df if raw else aggregate(df)


def aggregate(df):
    """Every repeat of :func:`measure_ttft` (``raw=True``) to medians with the interquartile range."""
    import polars as pl

    return (df.group_by("length_tokens", "case", maintain_order=True)
            .agg(pl.all().exclude("repeat", "decoder_from_host").median(),
                 pl.col("ttft_ms").quantile(0.25, "linear").alias("ttft_ms_q1"),
                 pl.col("ttft_ms").quantile(0.75, "linear").alias("ttft_ms_q3"),
                 pl.col("decoder_from_host").mean().alias("decoder_window_reuse"),
                 pl.len().alias("repeats"))
            .sort("length_tokens"))
