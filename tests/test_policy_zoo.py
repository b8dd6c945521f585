"""The policy zoo against brute-force replays written plainly here, plus its invariants.

The references are plug-ins (:class:`PluginPolicy`: dicts and lists, no numba), so the same
comparison tests the plug-in driver. ARC, SLRU, 2Q and S3-FIFO are checked against libCacheSim
itself on small random traces (tests/test_policy_peers.py; the conversation trace there too).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_kv.sim.policies import (
    ZOO,
    PluginPolicy,
    SecondSighting,
    WritePoints,
    get_policy,
    load_policy_file,
    make_policy,
)
from tiered_kv.sim.trace_replay import compile_trace, replay
from tiered_kv.sim.traces import random_trace

ROOT = Path(__file__).resolve().parent.parent
ALL_ZOO = (*ZOO, "belady-nobypass")


def _trace(seed, n=60, **kw):
    return compile_trace(random_trace(seed, n, **kw))


class RefLRU(PluginPolicy):
    name = "ref-lru"

    def reset(self, capacity_blocks):
        self.d = {}

    def lookup(self, b):
        return b in self.d

    def touch(self, b):
        del self.d[b]
        self.d[b] = None

    def insert(self, b):
        self.d[b] = None

    def evict(self):
        b = next(iter(self.d))
        del self.d[b]
        return b


class RefFIFO(RefLRU):
    name = "ref-fifo"

    def touch(self, b):
        pass


class RefLFU(RefLRU):
    """Brute force: scan for min (frequency, last access); halve counts every ``aging`` accesses."""

    name = "ref-lfu"
    aging = 0

    def reset(self, capacity_blocks):
        self.f, self.last, self.i = {}, {}, 0

    def lookup(self, b):
        return b in self.f

    def _tick(self):
        self.i += 1
        if self.aging and self.i % self.aging == 0:
            self.f = {k: (v + 1) // 2 for k, v in self.f.items()}

    def touch(self, b):
        self.f[b] += 1
        self.last[b] = self.i
        self._tick()

    def insert(self, b):
        self.f[b], self.last[b] = 1, self.i
        self._tick()

    def evict(self):
        b = min(self.f, key=lambda k: (self.f[k], self.last[k]))
        del self.f[b], self.last[b]
        return b


class RefSieve(RefLRU):
    name = "ref-sieve"

    def reset(self, capacity_blocks):
        self.q, self.vis, self.hand = [], {}, None  # q: oldest first

    def lookup(self, b):
        return b in self.vis

    def touch(self, b):
        self.vis[b] = True

    def insert(self, b):
        self.q.append(b)
        self.vis[b] = False

    def evict(self):
        i = len(self.q) - 1 - self.q[::-1].index(self.hand) if self.hand is not None else 0
        while self.vis[self.q[i]]:
            self.vis[self.q[i]] = False
            i = (i + 1) % len(self.q)
        b = self.q.pop(i)
        self.hand = self.q[i] if i < len(self.q) else None
        del self.vis[b]
        return b


def _with_lfu_aging_ticks(policy_cls, aging):
    """The LFU reference counts accesses, hits and misses alike (the kernel's clock)."""

    class Ref(policy_cls):
        pass

    Ref.aging = aging
    return Ref


def _ref_run(ref_cls, trace, cap, admit=None):
    ref = ref_cls()
    admit = np.ones(trace.n_accesses, bool) if admit is None else admit
    hit, ins, peak = ref.kernel_run(trace, cap, admit)
    return hit, ins


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), cap=st.integers(0, 25))
@pytest.mark.parametrize("name,ref", [("fifo", RefFIFO), ("sieve", RefSieve), ("lfu", RefLFU)])
def test_kernel_equals_brute_force(name, ref, seed, cap):
    t = _trace(seed)
    hit, ins, _ = get_policy(name).block_run(t, cap)
    rhit, rins = _ref_run(ref, t, cap)
    assert np.array_equal(hit, rhit) and np.array_equal(ins, rins)


def test_lfu_aging_on_misses_and_hits_clock():
    """Aging counts every access; the reference ticks on hits and inserts only, so compare where
    every access is a hit or an insert (no admission filter, capacity large enough never to refuse)."""
    t = _trace(3, 80)
    for cap in (3, 7, 12):
        hit, _, _ = get_policy("lfu", aging_accesses=5).block_run(t, cap)
        rhit, _ = _ref_run(_with_lfu_aging_ticks(RefLFU, 5), t, cap)
        assert np.array_equal(hit, rhit)
    assert not np.array_equal(get_policy("lfu", aging_accesses=5).block_run(_trace(9, 200), 5)[0],
                              get_policy("lfu").block_run(_trace(9, 200), 5)[0])


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), cap=st.integers(1, 30))
def test_class_lru_with_equal_weights_is_lru(seed, cap):
    df = random_trace(seed, 50)
    t = compile_trace(df)
    bs = t.uniform_block_size
    a = replay(t, get_policy("class-lru", capacity_tokens=cap * bs)).hit_tokens_per_request
    b = replay(t, get_policy("lru", capacity_tokens=cap * bs)).hit_tokens_per_request
    assert np.array_equal(a, b)
    rhit, _ = _ref_run(RefLRU, t, cap)
    assert np.array_equal(get_policy("class-lru").block_run(t, cap)[0], rhit)


class RefClassLRU(RefLRU):
    """Brute force: score every cached block by idle seconds / its class's weight."""

    name = "ref-class-lru"
    weights: dict = {}

    def reset(self, capacity_blocks):
        self.meta = {}  # block -> (last touch time, sequence, class)
        self.seq = 0

    def lookup(self, b):
        return b in self.meta

    def touch(self, b):
        self.meta[b] = (self.now, self.seq, self.traffic_class)
        self.seq += 1

    insert = touch

    def evict(self):
        def score(b):
            t, s, c = self.meta[b]
            return ((self.now - t) / self.weights.get(c, 1.0), -s)

        b = max(self.meta, key=score)
        del self.meta[b]
        return b


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), cap=st.integers(1, 20), w=st.sampled_from([0.25, 1.0, 3.0, 50.0]))
def test_class_lru_equals_brute_force(seed, cap, w):
    t = _trace(seed, 80, max_gap_s=20)

    class Ref(RefClassLRU):
        weights = {"agent": w}

    hit, ins, _ = get_policy("class-lru", weights={"agent": w}).block_run(t, cap)
    rhit, rins = _ref_run(Ref, t, cap)
    assert np.array_equal(hit, rhit) and np.array_equal(ins, rins)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), cap=st.integers(0, 30))
@pytest.mark.parametrize("name", ALL_ZOO)
def test_invariants(name, seed, cap):
    """Capacity never exceeded; a hit was seen before; an insert is a miss; big enough = infinite."""
    t = _trace(seed)
    hit, ins, peak = get_policy(name).block_run(t, cap)
    assert peak <= cap
    first = np.zeros(t.n_accesses, bool)
    first[np.unique(t.blocks, return_index=True)[1]] = True
    assert not (hit & first).any() and not (hit & ins).any()
    # 'big enough' for every policy: SLRU's four segments each hold a quarter of the capacity,
    # so only 4x the footprint guarantees no segment ever evicts (hypothesis found seed 3447).
    big, _, _ = get_policy(name).block_run(t, 4 * t.n_unique + 4)
    assert np.array_equal(big, ~first)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_lru_inclusion_and_belady_bounds(seed):
    """LRU is a stack algorithm (hits grow with capacity); MIN without bypass bounds the zoo at block level."""
    t = _trace(seed, 80)
    prev = np.zeros(t.n_accesses, bool)
    for cap in range(1, 20):
        h = get_policy("class-lru").block_run(t, cap)[0]
        assert not (prev & ~h).any()
        prev = h
        best = get_policy("belady-nobypass").block_run(t, cap)[0].sum()
        for name in ("fifo", "lfu", "arc", "sieve", "s3fifo", "2q", "slru"):
            assert get_policy(name).block_run(t, cap)[0].sum() <= best


def test_prefix_hits_never_beat_belady_bound():
    t = _trace(11, 200)
    bs = t.uniform_block_size
    for cap in (2, 5, 9, 17):
        bound = replay(t, get_policy("belady", capacity_tokens=cap * bs)).hit_blocks_per_request.sum()
        for name in ALL_ZOO:
            assert replay(t, get_policy(name, capacity_tokens=cap * bs)).hit_blocks_per_request.sum() <= bound


def test_admission_second_sighting_and_write_points():
    t = _trace(2, 300)
    exact = SecondSighting(counters=0).mask(t)
    bloom = SecondSighting(counters=1 << 16).mask(t)
    assert np.array_equal(exact, bloom)  # no collisions at this size
    first = np.zeros(t.n_accesses, bool)
    first[np.unique(t.blocks, return_index=True)[1]] = True
    assert not (exact & first).any()
    for name in ALL_ZOO:
        plain = get_policy(name, capacity_tokens=40).run(t).extra
        second = get_policy(name, capacity_tokens=40, admission="second-sighting").run(t).extra
        assert second["ssd_bytes_written"] <= plain["ssd_bytes_written"]
        mask = (t.depth % 2 == 0)
        _, ins, _ = get_policy(name, admission=WritePoints(is_write_point=mask)).block_run(t, 10)
        assert not (ins & ~mask).any()
    decayed = SecondSighting(counters=0, decay_accesses=10).mask(t)
    assert decayed.sum() < exact.sum()


def test_wear_fields():
    t = _trace(4, 200)
    x = get_policy("fifo", capacity_tokens=40, bytes_per_token=100.0).run(t).extra
    _, ins, _ = get_policy("fifo").block_run(t, 10)
    assert x["ssd_bytes_written"] == t.chunk_tokens[ins].sum() * 100.0
    r = replay(t, get_policy("fifo", capacity_tokens=40, bytes_per_token=100.0))
    assert x["bytes_written_per_hit_byte"] == pytest.approx(x["ssd_bytes_written"] / (r.hit_tokens * 100.0))
    assert x["drive_writes_per_day"] == pytest.approx(
        x["ssd_bytes_written"] / x["simulated_days"] / (40 * 100.0))


def test_gdsf_defaults_are_the_latency_preset():
    from tiered_kv.sim.cluster.latency import preset
    from tiered_kv.sim.policies.frequency import PRESET_PREFILL_A, PRESET_PREFILL_B

    c = preset("deepseek-v3")
    assert (PRESET_PREFILL_A, PRESET_PREFILL_B) == (c.prefill_a_s_per_token, c.prefill_b_s_per_token2)
    t = _trace(6, 200)
    v = get_policy("gdsf").value_per_byte(t)
    assert (np.diff(v[np.argsort(t.depth, kind="stable")]) >= -1e-30).all() or v.max() > v.min()


def _docs_example() -> str:
    text = (ROOT / "docs" / "policies.md").read_text()
    block = re.search(r"## Writing a policy.*?```python\n(.*?)```", text, re.S).group(1)
    assert len(block.strip().splitlines()) < 30
    return block


def test_docs_plugin_example_runs_and_is_mru(tmp_path):
    path = tmp_path / "mru.py"
    path.write_text(_docs_example())
    name = load_policy_file(f"{path}:MRU")
    assert name == "mru-example"
    t = _trace(8, 120)

    class RefMRU(RefLRU):
        name = "ref-mru"

        def evict(self):
            b = list(self.d)[-1]
            del self.d[b]
            return b

    for cap in (1, 4, 9):
        hit, ins, peak = make_policy(name).block_run(t, cap)
        rhit, rins = _ref_run(RefMRU, t, cap)
        assert np.array_equal(hit, rhit) and peak <= cap
    assert replay(t, make_policy(f"{path}:MRU", capacity_tokens=16)).requests == t.n_requests


def test_bad_input(tmp_path):
    with pytest.raises(ValueError, match=r"must be one of .*'arc'.*'sieve'"):
        get_policy("arcc")
    with pytest.raises(ValueError, match=r"s3fifo small_ratio: must be a number in \(0.0, 1.0\]"):
        get_policy("s3fifo", small_ratio=0)
    with pytest.raises(ValueError, match=r"slru n_segments: must be an integer in \[1, 64\]"):
        get_policy("slru", n_segments=0)
    with pytest.raises(ValueError, match=r"lfu aging_accesses"):
        make_policy("lfu:aging_accesses=-1")
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['agin'\]"):
        make_policy("lfu:agin=3")
    with pytest.raises(ValueError, match=r"second-sighting threshold: must be an integer in \[1, 255\]"):
        SecondSighting(threshold=0)
    with pytest.raises(ValueError, match="admission: must be one of"):
        get_policy("fifo", admission="twice")
    f = tmp_path / "p.py"
    f.write_text("from tiered_kv.sim.policies import PluginPolicy\n"
                 "class Half(PluginPolicy):\n    name = 'half'\n"
                 "    def reset(self, c): pass\n    def lookup(self, b): return False\n"
                 "    def touch(self, b): pass\n    def insert(self, b): pass\n")
    with pytest.raises(ValueError, match=rf"{re.escape(str(f))}: Half lacks method\(s\) evict"):
        load_policy_file(f"{f}:Half")
    with pytest.raises(ValueError, match=rf"{re.escape(str(f))}: defines no class 'Nope'"):
        load_policy_file(f"{f}:Nope")
    with pytest.raises(ValueError, match="no such policy file"):
        load_policy_file(f"{tmp_path / 'missing.py'}:X")
