"""Training: deterministic, learns, and the checkpoint round-trips (tiny preset, small corpus slice)."""

import torch

from tiered_kv.model import BOS, EOS, load_checkpoint, preset, save_checkpoint
from tiered_kv.train import (
    TrainConfig,
    load_corpus,
    loss_on,
    recall_augment,
    stdlib_files,
    train,
)


def test_corpus_is_the_stdlib_in_sorted_order():
    import sysconfig
    from pathlib import Path

    root = Path(sysconfig.get_paths()["stdlib"])
    files = stdlib_files()
    rel = [p.relative_to(root).as_posix() for p in files]
    assert len(files) > 100 and rel == sorted(rel) and not any("site-packages" in r for r in rel)
    c = load_corpus(max_bytes=200_000)
    assert c.train.numel() > 0 and c.heldout.numel() > 0
    assert int(c.train.max()) <= EOS and int(c.train[0]) == BOS
    assert c.description["heldout_rule"].startswith("every 20th")


def test_training_is_deterministic_and_learns(tmp_path):
    corpus = load_corpus(max_bytes=200_000)
    tc = TrainConfig(steps=8, batch=4, seq_len=48, lr=3e-3, warmup=2, eval_windows=2)
    cfg = preset("tiny")
    m1, r1 = train(cfg, tc, corpus, log=None, progress=False)
    m2, r2 = train(cfg, tc, corpus, log=None, progress=False)
    assert r1["loss_history"] == r2["loss_history"]
    assert r1["loss_history"][-1] < r1["loss_history"][0] - 0.5
    path = tmp_path / "tiny.pt"
    save_checkpoint(m1, path, meta=r1, dtype=torch.float32)
    loaded, meta = load_checkpoint(path)
    assert meta["corpus"]["python"] and loaded.cfg == cfg
    t = torch.randint(0, 256, (40,))
    torch.testing.assert_close(loaded.forward(t), m1.forward(t), rtol=0, atol=1e-5)


def test_interrupted_training_resumes_to_the_same_weights(tmp_path):
    corpus = load_corpus(max_bytes=200_000)
    tc = TrainConfig(steps=6, batch=2, seq_len=40, warmup=2, eval_windows=2, save_every=2,
                     curriculum=((0.0, 40), (0.5, 80)), recall_prob=0.5, recall_span=(4, 8), recall_distance=20,
                     scalar_lr_mult=10.0)
    cfg = preset("tiny", cross_recency=True)
    full, rec = train(cfg, tc, corpus, log=None, progress=False)
    ck = tmp_path / "run.pt"
    _, partial_rec = train(cfg, tc, corpus, log=None, progress=False, resume_from=ck, stop_after=3)
    assert partial_rec is None and ck.with_suffix(".partial.pt").exists()
    resumed, rec2 = train(cfg, tc, corpus, log=None, progress=False, resume_from=ck)
    assert rec2["loss_history"] == rec["loss_history"]
    for a, b in zip(full.state_dict().values(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert rec["tokens_seen"] == 3 * 80 + 3 * 80


def test_training_settings_out_of_range_name_the_setting():
    import pytest

    for bad, name in (({"steps": 0}, "steps"), ({"recall_prob": 1.5}, "recall_prob"),
                      ({"curriculum": ((0.5, 64), (0.2, 128))}, "curriculum"), ({"threads": 0}, "threads"),
                      ({"recall_weight": 0.5}, "recall_weight"), ({"recall_weight": 101}, "recall_weight"),
                      ({"scalar_lr_mult": 0.5}, "scalar_lr_mult")):
        with pytest.raises(ValueError, match=f"TrainConfig.{name}"):
            TrainConfig(**bad)


def test_recall_mask_marks_exactly_the_predictable_bytes_of_each_copy():
    tc = TrainConfig(recall_prob=1.0, recall_span=(5, 9), recall_distance=10, recall_copies=1)
    w = torch.arange(60).repeat(3, 1)  # distinct bytes: a copied byte is recognisable by its value
    out, mask = recall_augment(w, tc, torch.Generator().manual_seed(4))
    assert mask.shape == (3, 59) and mask.any()
    for i in range(3):
        for j in range(59):  # target j predicts out[i, j+1]
            moved = bool(out[i, j + 1] != w[i, j + 1])
            after_copy_start = bool(out[i, j] != w[i, j]) and int(out[i, j + 1]) == int(out[i, j]) + 1
            if mask[i, j]:
                assert moved and after_copy_start, (i, j)
            elif moved:  # the first byte of a copy is not predictable, so it is not marked
                assert not after_copy_start, (i, j)
    # same generator state, same windows and mask
    again, again_mask = recall_augment(w, tc, torch.Generator().manual_seed(4))
    assert torch.equal(again, out) and torch.equal(again_mask, mask)


def test_weighted_loss_is_the_weighted_mean_of_per_byte_losses():
    import torch.nn.functional as F

    from tiered_kv.model import EncoderDecoder

    torch.manual_seed(0)
    m = EncoderDecoder(preset("tiny")).eval()
    w = torch.randint(0, 256, (2, 33))
    weight = torch.ones(2, 32)
    weight[0, 5:9] = 4.0
    with torch.no_grad():
        per = F.cross_entropy(m.forward_batched(w[:, :-1]).flatten(0, 1).float(), w[:, 1:].flatten(), reduction="none")
        want = (per * weight.flatten()).sum() / weight.sum()
        torch.testing.assert_close(loss_on(m, w, weight), want)
        torch.testing.assert_close(loss_on(m, w, torch.ones(2, 32)), loss_on(m, w))


def test_scalar_lr_mult_speeds_only_the_small_parameters():
    """Scalars (at most 8 entries: gains, slopes, scales) move faster; matrices do not."""
    corpus = load_corpus(max_bytes=200_000)
    cfg = preset("tiny", cross_recency=True)
    moved = {}
    for mult in (1.0, 30.0):
        tc = TrainConfig(steps=4, batch=2, seq_len=48, lr=1e-3, warmup=1, eval_windows=2, scalar_lr_mult=mult)
        m, _ = train(cfg, tc, corpus, log=None, progress=False)
        moved[mult] = {n: p.detach().clone() for n, p in m.named_parameters()}
    slope = "decoder.0.cross.recency"
    init = torch.zeros_like(moved[1.0][slope])
    assert (moved[30.0][slope] - init).abs().max() > 10 * (moved[1.0][slope] - init).abs().max()
    big = "decoder.0.cross.wq.weight"
    assert not torch.equal(moved[1.0][big], moved[30.0][big])  # trained either way, at the same lr
