"""Replay a sharded day (:mod:`.shards`) hour by hour through LRU capacities and per-class TTLs at once.

Why not the LRU/TTL kernel of :mod:`tiered_kv.sim.policies.lru`: it compiles the whole trace into
memory and keeps five 8-byte arrays per block; a DeepSeek-scale day has about 1.2 billion accesses
and 0.6 billion blocks. Here the hours are read one at a time (polars lazy scan of that hour's
shards, sorted by time, streaming engine) and the cache state is 9 bytes per block plus one bit
per access, shared by every policy of the run:

* ``last_seq`` (uint32; uint64 past 4 G accesses): the access number of the block's last touch.
  LRU at capacity C keeps exactly the C blocks touched most recently, so a block is present iff
  its last touch is at or after that capacity's *frontier*, the oldest access number still
  cached. ``latest`` has one bit per access, set while that access is its block's last touch;
  inserting a block past the capacity advances the frontier over the bits until one set bit (one
  block) has left. Every capacity is one frontier and one counter over the same arrays, so any
  number of capacities cost one pass.
* ``last_t`` (float32 seconds; the multi-day span keeps it exact to a few ms) and ``bclass``
  (uint8): a per-class TTL keeps a block while ``now - last_t <= ttl[class of its last toucher]``,
  which needs no more state, so any number of TTL settings ride along too (TTLs without a capacity,
  as DeepSeek states its per-class retention).

Counting follows docs/semantics.md: requests in time order (ties: part order, then file order),
hit tokens ``min(p * block, L)`` with ``p`` leading blocks present before the request touches its
blocks. Requests before ``warmup_days`` warm the cache and are not counted.

A shard that does not parse or holds impossible values (time outside its hour, a block count
that does not match its length, an id outside its part's range) stops the run with its file and
row named.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

from tiered_kv.rusage import peak_rss_bytes
from tiered_kv.sim.day.shards import read_manifest
from tiered_kv.units import DAY_S, HOUR_S


@njit(cache=True)
def _set_bit(bits, j):  # pragma: no cover - compiled
    bits[j >> 3] |= np.uint8(1 << (j & 7))


@njit(cache=True, inline="always")
def _lru_run(ids, lo, hi, b0, last_seq, f):  # pragma: no cover - compiled
    """Leading accesses of ``lo..hi-1`` whose block an LRU with frontier ``f`` holds."""
    p = 0
    for i in range(lo, hi):
        s = last_seq[b0 + ids[i]]
        if s == 0 or s < f:
            break
        p += 1
    return p


@njit(cache=True, inline="always")
def _ttl_run(ids, lo, hi, b0, last_seq, last_t, bclass, now, ttl, t):  # pragma: no cover - compiled
    """Leading accesses of ``lo..hi-1`` whose block TTL row ``t`` keeps at ``now``."""
    p = 0
    for i in range(lo, hi):
        b = b0 + ids[i]
        if last_seq[b] == 0 or now - last_t[b] > ttl[t, bclass[b]]:
            break
        p += 1
    return p


@njit(cache=True, inline="always")
def _admit(k, prev, caps, frontier, count, latest):  # pragma: no cover - compiled
    """A block last touched at ``prev`` (0: never) is touched: if capacity ``k`` did not hold it,
    it enters, and the frontier advances past cached blocks while the capacity is over."""
    if prev == 0 or prev < frontier[k]:
        count[k] += 1
        f = frontier[k]
        while count[k] > caps[k]:
            if latest[f >> 3] & (1 << (f & 7)):
                count[k] -= 1
            f += 1
        frontier[k] = f


@njit(cache=True)
def _day_kernel(offsets, ids, base, times, lengths, classes, counted, bs,
                last_seq, last_t, bclass, latest, seq,
                caps, frontier, count, ttl, hit_out, input_out, req_out):  # pragma: no cover - compiled
    """Advance the shared state over one hour; add hit tokens per (policy, class) to ``hit_out``.

    Policies are the capacities ``caps`` (rows 0..len(caps)-1) then the TTL rows of ``ttl``
    (``ttl[t, class]`` seconds). Returns the access number of the last access.
    """
    n_cap = caps.shape[0]
    for r in range(offsets.shape[0] - 1):
        lo = offsets[r]
        hi = offsets[r + 1]
        b0 = base[r]
        now = times[r]
        c = classes[r]
        if counted[r]:
            L = lengths[r]
            input_out[c] += L
            req_out[c] += 1
            for k in range(n_cap):
                hit_out[k, c] += min(_lru_run(ids, lo, hi, b0, last_seq, frontier[k]) * bs, L)
            for t in range(ttl.shape[0]):
                hit_out[n_cap + t, c] += min(_ttl_run(ids, lo, hi, b0, last_seq, last_t, bclass, now, ttl, t) * bs, L)
        for i in range(lo, hi):
            b = b0 + ids[i]
            prev = last_seq[b]
            seq += 1
            if prev != 0:
                latest[prev >> 3] &= np.uint8(~(1 << (prev & 7)) & 0xFF)
            _set_bit(latest, seq)
            last_seq[b] = seq
            last_t[b] = now
            bclass[b] = c
            for k in range(n_cap):
                _admit(k, prev, caps, frontier, count, latest)
    return seq


def _read_hour(files: list[Path]):
    """One hour of every part, sorted by time (stable: part order breaks ties), via a lazy scan."""
    import polars as pl

    lf = pl.scan_parquet(files).select("timestamp_s", "input_length", "class_code", "part", "block_ids")
    try:
        return lf.sort("timestamp_s", maintain_order=True).collect(engine="streaming")
    except Exception as exc:  # name the shard that does not parse
        for f in files:
            _check_file_parses(f)
        raise ValueError(f"{files[0].parent}: the hour's shards do not read together ({exc})") from None


def _check_file_parses(path: Path) -> None:
    """Raise a ValueError naming ``path`` and the first rows that fail to decode."""
    import polars as pl

    from tiered_kv.sim.traces._reading import first_line

    try:
        n = pl.scan_parquet(path).select(pl.len()).collect().item()
    except Exception as exc:
        raise ValueError(f"{path}: not a readable Parquet shard (row: none readable; {first_line(exc)[:200]})") from None
    step = 65_536
    for lo in range(0, max(n, 1), step):
        try:
            pl.scan_parquet(path).slice(lo, step).collect()
        except Exception as exc:
            raise ValueError(f"{path}: rows {lo}..{min(lo + step, n) - 1} fail to parse ({first_line(exc)[:200]})") from None


def _bad_rows(df, hour: int, n_ids_by_part: np.ndarray, bs: int, n_classes: int) -> list[tuple[str, np.ndarray]]:
    """(what is wrong, bool per row) for each check of an hour's rows."""
    lens = df["block_ids"].list.len().to_numpy()
    t, L, part = df["timestamp_s"].to_numpy(), df["input_length"].to_numpy(), df["part"].to_numpy()
    max_id = df["block_ids"].list.max().fill_null(0).to_numpy()
    return [
        ("timestamp_s outside the file's hour", ~((t >= hour * HOUR_S) & (t < (hour + 1) * HOUR_S))),
        ("input_length < 1", L < 1),
        (f"block count != ceil(input_length / {bs})", lens != -(-L // bs)),
        ("class_code unknown", df["class_code"].to_numpy() >= n_classes),
        ("part unknown", part >= len(n_ids_by_part)),
        ("block id beyond the part's id range", max_id >= n_ids_by_part[np.minimum(part, len(n_ids_by_part) - 1)]),
    ]


def _validate_hour(df, hour: int, files: list[Path], n_ids_by_part: np.ndarray, bs: int, n_classes: int):
    """Vectorised checks of one hour; on a failure, the file and row (within that file) are named."""
    import polars as pl

    if not any(bad.any() for _, bad in _bad_rows(df, hour, n_ids_by_part, bs, n_classes)):
        return
    for f in files:  # slow path: which file, which row
        for what, bad in _bad_rows(pl.read_parquet(f), hour, n_ids_by_part, bs, n_classes):
            if bad.any():
                raise ValueError(f"{f}: row {int(np.flatnonzero(bad)[0])}: {what}")
    raise ValueError(f"hour {hour}: invalid rows, but no single shard shows them")


def _ttl_matrix(ttls: dict[str, dict[str, float]], classes: list[str]) -> np.ndarray:
    """[TTL policy, class] -> seconds; a class a policy does not name never expires."""
    ttl = np.full((len(ttls), len(classes)), np.inf)
    for i, per_class in enumerate(ttls.values()):
        for cls, seconds in per_class.items():
            if cls not in classes:
                raise ValueError(f"ttl {cls!r}: unknown class; allowed: {classes}")
            ttl[i, classes.index(cls)] = float(seconds)
    return ttl


def _hour_arrays(files: list[Path], hour: int, parts: tuple[np.ndarray, np.ndarray], bs: int, n_classes: int,
                 warm_s: float) -> tuple[np.ndarray, ...]:
    """An hour's shards, checked, as the kernel's flat arrays: offsets, ids, their part's id base,
    times, input lengths, class codes, and whether each request is past the warm-up (counted)."""
    id_base, n_ids_by_part = parts
    df = _read_hour(files)
    _validate_hour(df, hour, files, n_ids_by_part, bs, n_classes)
    lens = df["block_ids"].list.len().to_numpy().astype(np.int64)
    times = df["timestamp_s"].to_numpy()
    ids = df["block_ids"].explode().to_numpy().astype(np.uint32, copy=False)
    return (np.concatenate([[0], np.cumsum(lens)]), ids, id_base[df["part"].to_numpy()], times,
            df["input_length"].to_numpy().astype(np.int64), df["class_code"].to_numpy().astype(np.int64),
            times >= warm_s)


def day_policies(capacities, ttls, bytes_per_token: float, block_size: int = 512):
    """({name: capacity blocks}, {name: {class: seconds}}) from the strings ``tiered-kv day replay`` and
    figure 15 both take (``1PiB``, ``inf``; ``agent=3d,chatbot=7d``, ``1h``: :func:`tiered_kv.units.parse_ttl`).

    A bare duration is the TTL of both classes of the day (agent and chatbot).
    """
    from tiered_kv.units import format_bytes, parse_bytes, parse_ttl

    if not (1 <= bytes_per_token <= 1e8):
        raise ValueError(f"--bytes-per-token: {bytes_per_token:g} is out of range; allowed: [1, 1e8]")
    caps = {}
    for text in capacities:
        if text.strip().lower() in ("inf", "unlimited"):
            caps["lru unlimited"] = math.inf
            continue
        nbytes = parse_bytes(text, name="--capacity")
        if nbytes <= 0:
            raise ValueError(f"--capacity: {text!r} is out of range; allowed: a size > 0 or 'inf'")
        caps[f"lru {format_bytes(nbytes)}"] = nbytes // (bytes_per_token * block_size)
    out_ttls = {}
    for text in ttls:
        per_class, default = parse_ttl(text, name="--ttl")
        every = {} if default is None else {"agent": default, "chatbot": default}
        out_ttls[ttl_policy_name(text)] = every | per_class
    return caps, out_ttls


def ttl_policy_name(text: str) -> str:
    """The name a ``--ttl`` text's policy has in a day replay's results (``ttl agent=3d chatbot=7d``)."""
    return "ttl " + text.replace(",", " ")


def replay_day(root: str | Path, *, capacities: dict[str, float] | None = None,
               ttls: dict[str, dict[str, float]] | None = None, progress: bool = True) -> dict[str, Any]:
    """Replay the day under ``root`` once for every policy; hit rates per policy, class and hour.

    ``capacities``: name -> LRU capacity in blocks (``math.inf``: unlimited). ``ttls``: name ->
    {class: seconds} (classes not named never expire). Returns a JSON-ready dict.
    """
    from tqdm.auto import tqdm

    root = Path(root)
    m = read_manifest(root)
    capacities = {"lru unlimited": math.inf} if capacities is None else dict(capacities)
    ttls = {} if ttls is None else dict(ttls)
    classes, bs, n_ids, hours = m["classes"], int(m["block_size"]), int(m["n_ids"]), int(m["hours"])
    seq_dtype = np.uint32 if m["accesses"] < 2**32 - 2 else np.uint64
    t0, c0 = time.perf_counter(), time.process_time()
    state = (np.zeros(n_ids, seq_dtype), np.zeros(n_ids, np.float32), np.zeros(n_ids, np.uint8),
             np.zeros(m["accesses"] // 8 + 2, np.uint8))
    caps = np.array([min(c, 2**62) for c in capacities.values()], dtype=np.int64)
    frontier, count = np.ones(len(caps), np.int64), np.zeros(len(caps), np.int64)
    ttl, names = _ttl_matrix(ttls, classes), list(capacities) + list(ttls)
    warm_s = float(m["config"]["warmup_days"]) * DAY_S
    parts = tuple(np.array([p[k] for p in m["parts"]], dtype=np.int64) for k in ("id_base", "n_ids"))
    part_numbers = [int(p["part"]) for p in m["parts"]]
    hit = np.zeros((len(names), len(classes), hours), np.int64)
    inp, req = np.zeros((len(classes), hours), np.int64), np.zeros((len(classes), hours), np.int64)
    seq, read_s, kernel_s = 0, 0.0, 0.0
    for h in tqdm(range(hours), unit="hour", desc="replay day", disable=not progress):
        # the hour's shards of the manifest's parts, in part order (others there, e.g. of a part
        # whose generation was interrupted, are not read)
        folder = root / f"hour={h:04d}"
        files = [f for f in (folder / f"part-{k:05d}.parquet" for k in part_numbers) if f.exists()]
        if not files:
            continue
        ta = time.perf_counter()
        arrays = _hour_arrays(files, h, parts, bs, len(classes), warm_s)
        tb = time.perf_counter()
        hit_h = np.zeros((len(names), len(classes)), np.int64)
        inp_h, req_h = np.zeros(len(classes), np.int64), np.zeros(len(classes), np.int64)
        seq = int(_day_kernel(*arrays, bs, *state, seq_dtype(seq), caps, frontier, count, ttl,
                              hit_h, inp_h, req_h))
        hit[:, :, h], inp[:, h], req[:, h] = hit_h, inp_h, req_h
        read_s += tb - ta
        kernel_s += time.perf_counter() - tb
    return _result(m, names, classes, hit, inp, req, capacities, ttls, bs,
                   {"replay_s": time.perf_counter() - t0, "replay_cpu_s": time.process_time() - c0,
                    "read_s": read_s, "kernel_s": kernel_s, "load_average_1m": _load(),
                    "replay_peak_rss_bytes": peak_rss_bytes(), "state_bytes": sum(a.nbytes for a in state)})


def _load() -> float | None:
    """The 1-minute load average when the replay ended (others' work shares the cores)."""
    import os

    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _result(m, names, classes, hit, inp, req, capacities, ttls, bs, timing) -> dict[str, Any]:
    total_in = int(inp.sum())
    policies = {}
    for i, name in enumerate(names):
        lru = name in capacities
        policies[name] = {
            "kind": "lru" if lru else "ttl",
            "capacity_blocks": int(capacities[name]) if lru and math.isfinite(capacities[name]) else None,
            "ttl_seconds": None if lru else ttls[name],
            "hit_tokens": int(hit[i].sum()),
            "disk_token_fraction": hit[i].sum() / total_in if total_in else math.nan,
            "by_class": {c: (hit[i, k].sum() / inp[k].sum() if inp[k].sum() else math.nan)
                         for k, c in enumerate(classes)},
            "hourly": [(hit[i, :, h].sum() / inp[:, h].sum()) if inp[:, h].sum() else None
                       for h in range(hit.shape[2])],
        }
    counted_hours = [h for h in range(inp.shape[1]) if inp[:, h].sum()]
    return {
        "requests": int(req.sum()), "input_tokens": total_in, "block_size": bs,
        "counted_hours": [counted_hours[0], counted_hours[-1]] if counted_hours else None,
        "input_tokens_by_class": {c: int(inp[k].sum()) for k, c in enumerate(classes)},
        "policies": policies, **timing,
        "generated": {k: m[k] for k in ("requests", "accesses", "input_tokens", "n_ids", "hours", "config",
                                        "generation_s", "generation_workers", "generation_peak_rss_bytes",
                                        "generation_part_s_sum")},
        "parts": len(m["parts"]),
    }
