"""Figure 09's measurement reuses its own exact runs: the FP4 panel's numbers are the same bits
as when every run is computed again (tiny preset, seconds)."""

import torch

from tiered_kv.bounded_replay_error import _exact_runs, _roundtrip, fp4_error, replay_error
from tiered_kv.testing.models import scaled_tiny_model


def test_fp4_error_with_the_replay_grids_exact_runs_is_the_same_frame():
    model = scaled_tiny_model()
    g = torch.Generator().manual_seed(2)
    seqs = [torch.randint(0, 256, (72,), generator=g) for _ in range(3)]
    w = model.cfg.window
    exact: dict[int, list] = {}
    replay_error(model, seqs, windows=(w,), replays=(4,), steps=4, prefix=64, exact_runs=exact)
    assert set(exact) == {w} and len(exact[w]) == 3
    known = {"mxfp4": [logits for _, logits in exact[w]]}
    reused = fp4_error(model, seqs, steps=4, prefix=64, known=known)
    fresh = fp4_error(model, seqs, steps=4, prefix=64)
    assert reused.equals(fresh) and fresh["kl_nats"].min() > 0  # FP4 changes the logits, by the same bits
    # the exact run given the encoder's KV is the one that computes it
    rt = _roundtrip("nvfp4", 64, model)
    cut = [s[:68] for s in seqs]
    kvs = list(model.global_kv_batched(torch.stack(cut[:1])).unbind())
    (a,), (b,) = _exact_runs(model, cut[:1], 64, rt), _exact_runs(model, cut[:1], 64, rt, kvs[:1])
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_batched_exact_runs_match_the_inference_path_across_batches(monkeypatch):
    """Three sequences in batches of two: every exact run's KV and logits are the one-sequence
    inference path's (encode, then decode from position 0), given its KV or not."""
    import tiered_kv.bounded_replay_error as bre

    monkeypatch.setattr(bre, "BATCH", 2)
    model = scaled_tiny_model()
    g = torch.Generator().manual_seed(3)
    cut = [torch.randint(0, 256, (68,), generator=g) for _ in range(3)]
    same = _roundtrip(None, 64, model)
    kvs = [model.encode(s, 0)[0] for s in cut]
    for runs in (_exact_runs(model, cut, 64, same), _exact_runs(model, cut, 64, same, kvs)):
        assert len(runs) == 3
        for s, kv, (got_kv, got) in zip(cut, kvs, runs, strict=True):
            want, _ = model.decode(s[:-1], 0, kv, all_logits=True)
            torch.testing.assert_close(got_kv, kv, rtol=0, atol=1e-5)
            torch.testing.assert_close(got, want[63:], rtol=0, atol=1e-4)


def test_fp4_error_takes_any_stored_format_and_fp32_changes_nothing():
    """``formats=``: any format the SSD tier stores; fp32 (the unquantized ablation) is the
    reference's own KV, so its error is exactly zero, and bf16's is small but not zero."""
    model = scaled_tiny_model()
    g = torch.Generator().manual_seed(4)
    seqs = [torch.randint(0, 256, (72,), generator=g) for _ in range(2)]
    fp32, bf16 = fp4_error(model, seqs, formats=("fp32", "bf16"), steps=4, prefix=64).rows(named=True)
    assert fp32["format"] == "fp32" and fp32["kl_nats"] == 0 and fp32["agreement"] == 1
    assert bf16["format"] == "bf16" and 0 < bf16["kl_nats"] < 1e-3
