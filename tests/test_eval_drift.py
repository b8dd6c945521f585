"""Checkpoint evaluation (held-out loss, long-context gain, context curve), checkpoint errors,
replay error with intervals, and the exact-prefix drift experiment (tiny preset, seconds)."""

import json

import pytest
import torch

from tiered_kv.bounded_replay_error import near_exact_replay, replay_error
from tiered_kv.cli import main
from tiered_kv.drift import drift_summary, prefix_drift
from tiered_kv.evaluate import context_curve, heldout_loss, long_context_gain, read_text_files
from tiered_kv.model import load_checkpoint, save_checkpoint
from tiered_kv.testing.models import scaled_tiny_model


@pytest.fixture(scope="module")
def model():
    return scaled_tiny_model()


@pytest.fixture(scope="module")
def stream():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (6000,), generator=g, dtype=torch.int16)


def test_long_context_gain_is_short_minus_full_on_the_same_targets(model, stream):
    r = long_context_gain(model, stream, window=1024, short=128, target=64, n=4)
    assert r["full_context_bytes"] == 960 and r["short_context_bytes"] == 128
    assert r["long_context_gain_nats"] == pytest.approx(r["short_context_nats_per_byte"] - r["full_context_nats_per_byte"],
                                                        abs=1e-5)
    lo, hi = r["long_context_gain_ci95"]
    assert lo <= r["long_context_gain_nats"] <= hi


def test_context_curve_and_heldout_loss(model, stream):
    rows = context_curve(model, stream, (16, 64, 256), target=32, n=3)
    assert [r["context_bytes"] for r in rows] == [16, 64, 256]
    assert all(0 < r["nats_per_byte"] < 20 for r in rows)
    assert 0 < heldout_loss(model, stream, n=4, seq_len=64) < 20
    with pytest.raises(ValueError, match="contexts"):
        context_curve(model, stream, (4096,), target=32, n=2)


def test_seeds_redraw_the_windows_and_batch_only_groups_them(model, stream):
    """``seed=``: other windows, the same ones again for the same seed; ``heldout_loss(batch=)``
    trades memory for speed and leaves the mean (weighted by batch size) as it is."""
    from tiered_kv.evaluate import copy_probe

    base = heldout_loss(model, stream, n=4, seq_len=64)
    assert heldout_loss(model, stream, n=4, seq_len=64, batch=3) == pytest.approx(base, rel=1e-5)
    assert heldout_loss(model, stream, n=4, seq_len=64, seed=9) != base
    curve = lambda **kw: context_curve(model, stream, (16,), target=32, n=2, **kw)[0]["nats_per_byte"]  # noqa: E731
    assert curve(seed=9) == curve(seed=9) != curve()
    probe = lambda **kw: copy_probe(model, stream, (40,), span=16, n=2, **kw)[0]["first_nats_per_byte"]  # noqa: E731
    assert probe(seed=9) == probe(seed=9) != probe()


def test_eval_command_json_and_bad_inputs(model, tmp_path, capsys):
    ck = tmp_path / "tiny.pt"
    save_checkpoint(model, ck, meta={})
    text = tmp_path / "a.py"
    text.write_text("def f(x):\n    return x + 1\n" * 400)
    assert main(["eval", "--checkpoint", str(ck), "--text", str(text), "--samples", "2", "--curve-samples", "2",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"heldout_nats_per_byte", "long_context_gain_nats", "context_curve"} <= set(out)
    assert all({"context_bytes", "nats_per_byte"} <= set(r) for r in out["context_curve"])
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\x00\xff" * 100)
    assert main(["eval", "--checkpoint", str(ck), "--text", str(binary)]) == 2
    assert "blob.bin" in capsys.readouterr().err
    assert main(["eval", "--checkpoint", str(ck), "--preset", "small", "--text", str(text)]) == 2
    assert "expected 'small'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="not a text file"):
        read_text_files([binary])


def test_checkpoint_errors_name_the_file(model, tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        load_checkpoint(tmp_path / "nope.pt")
    ck = tmp_path / "tiny.pt"
    save_checkpoint(model, ck)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(ck.read_bytes()[:5000])
    with pytest.raises(ValueError, match="cut.pt.*truncated or corrupt"):
        load_checkpoint(cut)
    blob = torch.load(ck, weights_only=True)
    blob["config"]["d_model"] = 96
    bad = tmp_path / "bad.pt"
    torch.save(blob, bad)
    with pytest.raises(ValueError, match="bad.pt: weights do not match"):
        load_checkpoint(bad)


def test_replay_error_has_intervals_and_is_zero_at_the_exact_bound(model):
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, 256, (72,), generator=g) for _ in range(3)]
    df = replay_error(model, seqs, windows=(8,), replays=(4, 8), steps=4, prefix=64)
    bound = max(model.cfg.enc_layers, model.cfg.dec_layers) * 7 + 1
    assert df["replay_tokens"].to_list() == [4, 8, bound]
    assert (df["kl_ci95_low"] <= df["kl_nats"]).all() and (df["kl_nats"] <= df["kl_ci95_high"]).all()
    exact = df.filter(df["replay_tokens"] == bound).row(0, named=True)
    assert exact["kl_nats"] < 1e-9 and exact["agreement"] == 1.0
    assert near_exact_replay(df, 8)["replay_tokens"] <= bound


def test_near_exact_threshold_picks_the_shortest_replay_under_it():
    """The upper 95% bound must be below ``threshold``; a NaN bound (one sample) falls back to the mean."""
    import polars as pl

    frame = pl.DataFrame({"window_tokens": [8, 8, 8, 16], "replay_tokens": [4, 8, 22, 4],
                          "kl_nats": [0.1, 0.01, 0.0, 0.0], "kl_ci95_high": [0.2, 0.02, float("nan"), 0.0]})
    assert near_exact_replay(frame, 8)["replay_tokens"] == 22
    assert near_exact_replay(frame, 8, threshold=0.05)["replay_tokens"] == 8
    assert near_exact_replay(frame, 8, threshold=1.0)["replay_tokens"] == 4
    assert near_exact_replay(frame, 8, threshold=0.0) is None


def test_drift_exact_writes_stay_exact_approximate_ones_do_not(model):
    g = torch.Generator().manual_seed(0)
    convs = [torch.randint(0, 256, (300,), generator=g) for _ in range(2)]
    df = prefix_drift(model, convs, turns=4, first=48, step=40, block_size=16)
    exact = df.filter(df["mode"] == "exact")
    approx = df.filter(df["mode"] == "approximate")
    assert exact["kv_max_abs_error"].max() == 0.0 and exact["kv_values_differing"].sum() == 0
    assert approx["kv_values_differing"].sum() > 0 and (exact["kv_values"] > 0).all()
    assert approx.filter(approx["turn"] >= 2)["kv_max_abs_error"].min() > 0
    s = drift_summary(df)
    assert s.height == 8 and set(s["conversations"]) == {2}
    with pytest.raises(ValueError, match="needs"):
        prefix_drift(model, [convs[0][:50]], turns=4, first=48, step=40)


def test_drift_references_equal_a_fresh_uncached_run_per_prompt(model, tmp_path):
    """prefix_drift computes the references once over the longest prompt; that is only right if
    every prompt's uncached global KV and stored blocks are the longest prompt's first n positions."""
    from tiered_kv.drift import _exact_references
    from tiered_kv.engine import Engine, fp4_roundtrip, namespace_for
    from tiered_kv.tiers.host import HostTier
    from tiered_kv.tiers.ssd import SSDConfig, SSDTier

    conv = torch.randint(0, 256, (700,), generator=torch.Generator().manual_seed(3))
    ns = namespace_for(model, block_size=16)
    lengths = [40, 50, 88, 95, 300, 700]  # gaps under the decoder's reach (30) test the carried windows
    refs = _exact_references(model, conv, lengths, ns, str(tmp_path / "longest"))
    for n, (logits, stored) in zip(lengths, refs, strict=True):
        with torch.no_grad():
            kv = model.encode(conv[:n], 0)[0]
            fresh = model.decode(conv[:n], 0, fp4_roundtrip(kv, ns))[0][-1]
        ssd = SSDTier(tmp_path / str(n), namespace=ns, config=SSDConfig(background_touch=False))
        Engine(model, ssd, HostTier("1GiB"), name="uncached").prefill(conv[:n])
        own = ssd.get_prefix(conv[:n]).kv(torch.float32)
        assert own.shape[0] == n - n % 16 and torch.equal(stored[:own.shape[0]], own)
        torch.testing.assert_close(logits, fresh, rtol=0, atol=1e-4)
    nvfp4 = namespace_for(model, fmt="nvfp4", block_size=16)  # per-block scales: a prompt inside a block differs
    with pytest.raises(ValueError, match="ends inside a 16-token block"):
        _exact_references(model, conv, lengths, nvfp4, str(tmp_path / "nv"))
    _exact_references(model, conv, [48, 96, 700], nvfp4, str(tmp_path / "nv-ok"))  # the longest may end anywhere


class _NGramCopier(torch.nn.Module):
    """Predicts the byte that followed the last earlier occurrence of the current 8-gram."""

    def forward_batched(self, tokens):
        b, t = tokens.shape
        logits = torch.zeros(b, t, 258)
        for i in range(b):
            seen = {}
            row = tokens[i].tolist()
            for p in range(t):
                key = tuple(row[max(0, p - 7): p + 1])
                if len(key) == 8 and key in seen and seen[key] + 1 < t:
                    logits[i, p, row[seen[key] + 1]] = 30.0
                if len(key) == 8:
                    seen[key] = p
        return logits


def test_copy_probe_sees_a_model_that_copies_and_one_that_does_not(model, stream):
    import math

    from tiered_kv.evaluate import copy_probe

    rows = copy_probe(_NGramCopier(), stream, distances=(300, 900), span=64, n=3)
    for r in rows:
        assert r["first_nats_per_byte"] == pytest.approx(math.log(258), abs=0.05)  # random bytes: nothing to copy
        assert r["repeat_nats_per_byte"] < 0.2 * r["first_nats_per_byte"]  # all but the first 7 bytes copied
        assert r["copy_gain_nats"] > 4 and r["copy_gain_ci95"][0] <= r["copy_gain_nats"] <= r["copy_gain_ci95"][1]
    assert [r["distance_bytes"] for r in rows] == [300, 900]
    # the scaled random model has no copying mechanism: the repeat costs about what the original did
    plain = copy_probe(model, stream, distances=(300,), span=64, n=3)[0]
    assert abs(plain["copy_gain_nats"]) < 0.5
