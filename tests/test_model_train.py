"""Training: deterministic, learns, and the checkpoint round-trips (tiny preset, small corpus slice)."""

import torch

from tiered_kv.model import BOS, EOS, load_checkpoint, preset, save_checkpoint
from tiered_kv.train import TrainConfig, load_corpus, stdlib_files, train


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
                     curriculum=((0.0, 40), (0.5, 80)), recall_prob=0.5, recall_span=(4, 8), recall_distance=20)
    cfg = preset("tiny")
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
                      ({"curriculum": ((0.5, 64), (0.2, 128))}, "curriculum"), ({"threads": 0}, "threads")):
        with pytest.raises(ValueError, match=f"TrainConfig.{name}"):
            TrainConfig(**bad)
