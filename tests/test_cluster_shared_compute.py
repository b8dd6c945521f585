"""Streams on shared cores: the queue model against the per-machine one and hand-computed cases,
the admission rule that counts the cores, and the tail statistics of repeated runs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tiered_kv.sim.cluster import latency as L
from tiered_kv.sim.cluster import shared_compute as S
from tiered_kv.sim.cluster import tail_stats as T


def _mix(seed: int = 1, count: int = 60, streams: int = 4):
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.uniform(0, 5, count))
    n = rng.integers(100, 2000, count).astype(float)
    restore = rng.random(count) < 0.5
    loaded = np.where(restore, n - 32, 0.0)
    cfg = L.LatencyConfig(kv_bytes_per_token=70.0, read_bandwidth_bytes_per_s=2e6, prefill_a_s_per_token=1e-4,
                          prefill_b_s_per_token2=3e-8, prefill_fixed_s=0.01, replay_tokens=128)
    times = dict(restore_s=L.prefill_seconds(cfg, loaded, n) + cfg.prefill_fixed_s
                 + np.where(restore, L.replay_seconds(cfg, loaded), 0.0),
                 recompute_s=L.prefill_seconds(cfg, 0 * n, n) + cfg.prefill_fixed_s,
                 read_s=L.load_seconds(cfg, loaded), write_s=L.load_seconds(cfg, n - loaded))
    return cfg, arrival, np.arange(count) % streams, n, loaded, restore, times


@pytest.mark.parametrize("policy, admission", [("load", False), ("own", True)])
def test_a_core_per_stream_is_the_per_machine_model(policy, admission):
    """With as many cores as streams nothing is shared: the processor-sharing loop must give
    simulate_queue's answer (a separate event kernel), decisions and all."""
    cfg, arrival, stream, n, loaded, restore, times = _mix()
    ref = L.simulate_queue(cfg, arrival, stream, n, loaded, admission=admission)
    got = S.simulate_shared(arrival, stream, restore, cores=4, policy=policy, **times)
    assert np.array_equal(got.recomputed, ref.recomputed)
    assert np.allclose(got.ttft_s, ref.ttft_s, rtol=0, atol=1e-12)
    assert admission is False or got.recomputed.any()  # the case exercises admission


def test_processor_sharing_by_hand():
    zero = np.zeros(2)
    # two 1 s prefills on one core, both at t=0: each runs at half speed, both end at 2 s
    r = S.simulate_shared([0.0, 0.0], [0, 1], [False, False], restore_s=zero, recompute_s=np.array([1.0, 1.0]),
                          read_s=zero, write_s=zero, cores=1)
    assert r.ttft_s.tolist() == [2.0, 2.0]
    # 0.5 s and 1 s: the short one ends at 1.0 (half speed), the long one has 0.5 s left, alone: 1.5
    r = S.simulate_shared([0.0, 0.0], [0, 1], [False, False], restore_s=zero, recompute_s=np.array([0.5, 1.0]),
                          read_s=zero, write_s=zero, cores=1)
    assert r.ttft_s.tolist() == [1.0, 1.5]
    # two cores: no sharing; one stream runs its two requests one after the other (FIFO)
    r = S.simulate_shared([0.0, 0.0, 0.0], [0, 0, 1], [False] * 3, restore_s=np.zeros(3),
                          recompute_s=np.array([1.0, 0.5, 0.25]), read_s=np.zeros(3), write_s=np.zeros(3), cores=2)
    assert r.ttft_s.tolist() == [1.0, 1.5, 0.25] and r.start_s.tolist() == [0.0, 1.0, 0.0]


def test_shared_cores_slow_every_stream_and_admission_rules_differ():
    cfg, arrival, stream, n, loaded, restore, times = _mix()
    alone = S.simulate_shared(arrival, stream, restore, cores=4, **times)
    shared = S.simulate_shared(arrival, stream, restore, cores=1, **times)
    assert np.all(shared.ttft_s >= alone.ttft_s - 1e-12) and np.percentile(shared.ttft_s, 99) > \
        np.percentile(alone.ttft_s, 99)
    own = S.simulate_shared(arrival, stream, restore, cores=1, policy="own", **times)
    counted = S.simulate_shared(arrival, stream, restore, cores=1, policy="shared", **times)
    assert counted.recomputed.sum() < own.recomputed.sum()  # counting the cores recomputes less
    assert not (counted.recomputed & ~restore).any()


def test_recompute_pays_by_hand():
    # one core, one other stream busy: the request runs at half speed (f = 2)
    st = S.QueueState(queued_read_s=3.0, stream_backlog_s=0.0, busy_streams=1, cores=1)
    # load ends 3 + 2*0.2 = 3.4, recompute 2*1 = 2: gain 1.4 > the 0.8 s of extra work the other waits
    assert S.recompute_pays(st, restore_compute_s=0.2, recompute_s=1.0)
    st2 = S.QueueState(queued_read_s=2.0, stream_backlog_s=0.0, busy_streams=1, cores=1)
    # load ends 2.4, recompute 2.0: gain 0.4 < 0.8: load; the own-latency rule recomputes it
    assert not S.recompute_pays(st2, restore_compute_s=0.2, recompute_s=1.0)
    assert S.decide("own", st2, restore_compute_s=0.2, recompute_s=1.0)
    # cores to spare (two cores, one other busy): no one is delayed, the gain alone decides
    st3 = S.QueueState(queued_read_s=2.0, stream_backlog_s=0.0, busy_streams=1, cores=2)
    assert S.recompute_pays(st3, restore_compute_s=0.2, recompute_s=1.0)  # 2.2 > 1.0
    assert not S.decide("load", st3, restore_compute_s=0.2, recompute_s=1.0)
    with pytest.raises(ValueError, match="policy"):
        S.decide("always", st3, restore_compute_s=0.2, recompute_s=1.0)
    with pytest.raises(ValueError, match="cores"):
        S.QueueState(queued_read_s=0.0, stream_backlog_s=0.0, busy_streams=0, cores=0)


def test_order_statistic_ranks_match_known_values():
    # the textbook 95% interval of a median from 20 values: the 6th to the 15th
    assert T.order_statistic_ranks(20, 50, 0.95) == (6, 15)
    # p99 of 100 values at 90%: from the 97th (P(B <= 96) = 0.018 for B ~ Bin(100, 0.99)), no upper
    # end (P(B <= 99) = 1 - 0.99^100 = 0.634 < 0.95)
    assert T.order_statistic_ranks(100, 99, 0.9) == (97, None)
    assert T.order_statistic_ranks(300, 99, 0.9)[1] == 300  # 1 - 0.99^299 = 0.9505: the maximum bounds it
    assert T._binomial_cdf(96, 100, 0.99) == pytest.approx(0.01837, abs=1e-4)
    assert T.order_statistic_interval([3.0, 1.0, 2.0], 50) == [None, None]  # 3 values bound nothing at 90%
    v = np.arange(1.0, 21.0)
    assert T.order_statistic_interval(v[::-1], 50, 0.95) == [6.0, 15.0]


def test_over_repeats_and_paired_ratios():
    runs = [T.class_percentiles(np.array(t), [True, True, False, False], interval=False)
            for t in ([1.0, 2.0, 1.0, 1.0], [1.0, 4.0, 1.0, 1.0], [1.0, 3.0, 1.0, 1.0])]
    agg = T.over_repeats(runs)
    assert agg["restore"]["max_ms"] == 3000.0 and agg["restore"]["max_ms_spread"] == [2000.0, 4000.0]
    assert agg["restore"]["repeats"] == 3 and agg["miss"]["p99_ms"] == 1000.0
    halved = [T.class_percentiles(np.array(t) / 2, [True, True, False, False], interval=False)
              for t in ([1.0, 2.0, 1.0, 1.0], [1.0, 4.0, 1.0, 1.0], [1.0, 3.0, 1.0, 1.0])]
    r = T.paired_ratios(halved, runs, "restore")
    assert r["ratios"] == pytest.approx([0.5] * 3) and T.direction(r, changed=True) == "cut"
    up = T.paired_ratios(runs, halved, "restore")
    assert T.direction(up, changed=True) == "increase" and T.direction(up, changed=False) == "no_decision"
    mixed = T.paired_ratios(runs[::-1], runs, "restore")  # 3/2, 3/4... pairs on both sides of 1
    assert mixed["min"] < 1 < mixed["max"] and T.direction(mixed, changed=True) == "mixed"
    assert math.isclose(mixed["median"], 1.0)
    assert T.direction(T.paired_ratios(runs, runs, "miss"), changed=True) == "even"
