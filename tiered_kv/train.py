"""Byte-level training on the Python standard library's own source files.

Why this corpus: it exists offline on every machine that can run this package (it is the
running interpreter's ``Lib/``), it is a few tens of MB of real, structured text with long-range
structure (imports, class bodies, docstrings), and its exact identity is recorded (Python
version, file count, bytes) so a checkpoint can be traced to what it saw.

Determinism: files are read in sorted relative-path order; every ``heldout_every``-th file is
held out; training windows are drawn from a ``torch.Generator`` seeded from ``TrainConfig.seed``;
the model is initialized under the same seed. Same interpreter + same settings -> same bytes.
"""

from __future__ import annotations

import math
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from tiered_kv.model import BOS, EOS, EncoderDecoder, ModelConfig, load_checkpoint, need, need_ints, preset


@dataclass(frozen=True)
class TrainConfig:
    """Optimizer and data settings; ``steps`` x ``batch`` x ``seq_len`` tokens are seen.

    ``curriculum`` lengthens the training sequences during the run: pairs of (fraction of
    the steps at which a phase starts, sequence length); the tokens per step stay
    ``batch * seq_len`` (the batch shrinks as sequences grow). Long sequences are the point:
    only a sequence several times W long rewards the decoder's cross-attention for looking
    beyond its window. ``recall_prob`` is the share of sequences that get one *recall
    augmentation*: a span of ``recall_span`` bytes copied from at least ``recall_distance``
    bytes earlier, so exact long-range copying (through the global KV, not the window) pays.
    ``recall_weight`` multiplies the loss on the predictable bytes of each copy (all but its
    first byte) in the batch mean: copying is a small share of the bytes, and its gradient
    must not drown in that of ordinary next-byte prediction for the mechanism to form in a
    CPU-sized run.
    """

    steps: int = 300
    batch: int = 8
    seq_len: int = 512
    lr: float = 3e-3
    warmup: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    heldout_every: int = 20
    eval_windows: int = 32
    threads: int = 1
    curriculum: tuple[tuple[float, int], ...] = ()
    recall_prob: float = 0.0
    recall_span: tuple[int, int] = (32, 256)
    recall_distance: int = 640
    recall_copies: int = 1
    recall_weight: float = 1.0
    #: Learning-rate multiplier for parameters of at most 8 entries (per-head logit scales,
    #: distance slopes, smear mixes). Adam moves a parameter by about lr per step, so at lr
    #: 1e-3 a 300-step stage leaves a scalar within ~0.3 of its init.
    scalar_lr_mult: float = 1.0
    amp: bool = False
    eval_every: int = 0
    save_every: int = 50

    def __post_init__(self) -> None:
        need_ints(self, ("steps", "batch", "seq_len", "warmup", "heldout_every", "eval_windows", "threads",
                         "recall_distance", "save_every", "recall_copies"))
        need(self, 0 < self.lr < 1, "lr", "in (0, 1)")
        need(self, self.weight_decay >= 0, "weight_decay", ">= 0")
        need(self, self.grad_clip > 0, "grad_clip", "> 0")
        need(self, self.threads <= 256, "threads", "in [1, 256]")
        need(self, 1 <= self.recall_weight <= 100, "recall_weight", "in [1, 100]")
        need(self, 1 <= self.scalar_lr_mult <= 1000, "scalar_lr_mult", "in [1, 1000]")
        need(self, 0 <= self.recall_prob <= 1, "recall_prob", "in [0, 1]")
        need(self, 1 <= self.recall_span[0] <= self.recall_span[1], "recall_span", "(min, max) with 1 <= min <= max")
        need(self, isinstance(self.eval_every, int) and self.eval_every >= 0, "eval_every",
             "an integer >= 0 (0 = only at the end)")
        fracs = [frac for frac, _ in self.curriculum]
        need(self, all(0 <= f < 1 for f in fracs) and fracs == sorted(set(fracs))
             and all(isinstance(n, int) and n >= 2 for _, n in self.curriculum), "curriculum",
             "(start fraction, sequence length) phases, fractions increasing within [0, 1), lengths integers >= 2")

    def tokens_seen(self, steps: int) -> int:
        """Tokens in the first ``steps`` steps' batches, under the curriculum."""
        return sum(b * s for b, s in map(self.shape_at, range(steps)))

    def shape_at(self, step: int) -> tuple[int, int]:
        """(batch, seq_len) of ``step`` under the curriculum."""
        length = self.seq_len
        for frac, phase_len in self.curriculum:
            if step >= frac * self.steps:
                length = phase_len
        return max(1, self.batch * self.seq_len // length), length


TRAIN_PRESETS: dict[str, TrainConfig] = {
    "tiny": TrainConfig(steps=60, batch=8, seq_len=128, lr=3e-3, warmup=5, eval_windows=8),
    # Sequences grow to 8x W so that looking past the window pays; the record
    # (data/checkpoints/small.json) has the tokens seen and the wall time.
    "small": TrainConfig(steps=1200, batch=8, seq_len=1024, lr=3e-3, warmup=50, threads=2, amp=True,
                         curriculum=((0.0, 1024), (0.25, 2048), (0.5, 4096)), recall_prob=0.5,
                         recall_weight=2.0, eval_every=100, save_every=25),
    # Second stage over ``small`` (``--init`` its checkpoint): the cross-attention's distance
    # penalty added and two copied spans per sequence from >= 600 bytes back, so that copying
    # must form in the cross-attention over the global KV; scalars (logit scales, slopes) at 10x.
    "small-kv": TrainConfig(steps=360, batch=4, seq_len=2048, lr=1.5e-3, warmup=20, threads=2, amp=True,
                            curriculum=((0.0, 2048), (0.25, 4096)), recall_prob=1.0, recall_span=(16, 192),
                            recall_distance=600, recall_copies=2, recall_weight=2.0, scalar_lr_mult=10.0,
                            eval_every=60, save_every=20),
}

#: Model preset each training preset trains, and settings it replaces in that preset: the
#: first stage of ``small`` trains it without the distance penalty, which the second adds.
MODEL_OF = {"tiny": "tiny", "small": "small", "small-kv": "small"}
MODEL_SETTINGS: dict[str, dict] = {"small": {"cross_recency": False}}


@dataclass(frozen=True)
class Corpus:
    """Token streams (int16: 256 bytes + BOS/EOS) for training and held-out evaluation."""

    train: torch.Tensor
    heldout: torch.Tensor
    description: dict


def stdlib_files() -> list[Path]:
    """Every ``.py`` file of the standard library (not site-packages), sorted by relative path."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in root.rglob("*.py") if "site-packages" not in p.parts and p.is_file()]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def partial_path(out: str | Path) -> Path:
    """Where a run writing ``out`` keeps its resumable state (``<name>.partial.pt``)."""
    return Path(out).with_suffix(".partial.pt")


def document_tokens(data: bytes) -> torch.Tensor:
    """One document as int16 tokens: BOS, its bytes, EOS."""
    t = torch.empty(len(data) + 2, dtype=torch.int16)
    t[0], t[-1] = BOS, EOS
    if data:
        t[1:-1] = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int16)
    return t


def load_corpus(heldout_every: int = 20, max_bytes: int | None = None, heldout_only: bool = False) -> Corpus:
    """Read the stdlib sources into BOS/EOS-delimited byte streams with a held-out split.

    ``heldout_only`` skips reading the training files (fast evaluation); ``max_bytes`` stops
    after that many source bytes have been read.
    """
    files = stdlib_files()
    if not files:
        raise FileNotFoundError(f"no .py files under {sysconfig.get_paths()['stdlib']}")
    train_parts, held_parts, n_bytes = [], [], 0
    for i, path in enumerate(files):
        if heldout_only and i % heldout_every:
            continue
        data = path.read_bytes()
        n_bytes += len(data)
        (held_parts if i % heldout_every == 0 else train_parts).append(document_tokens(data))
        if max_bytes is not None and n_bytes >= max_bytes:
            break
    desc = {
        "source": "Python standard library .py files (sysconfig stdlib path, no site-packages)",
        "python": sys.version.split()[0],
        "files": len(files) if not heldout_only and max_bytes is None else len(train_parts) + len(held_parts),
        "bytes": n_bytes,
        "heldout_files": len(held_parts),
        "heldout_rule": f"every {heldout_every}th file in sorted relative-path order",
    }
    empty = torch.zeros(0, dtype=torch.int16)
    return Corpus(torch.cat(train_parts) if train_parts else empty, torch.cat(held_parts), desc)


def sample_windows(stream: torch.Tensor, n: int, seq_len: int, gen: torch.Generator) -> torch.Tensor:
    """``n`` random windows of ``seq_len + 1`` tokens (inputs and shifted targets)."""
    starts = torch.randint(0, stream.numel() - seq_len - 1, (n,), generator=gen)
    idx = starts[:, None] + torch.arange(seq_len + 1)[None, :]
    return stream[idx].long()


def recall_augment(windows: torch.Tensor, tc: TrainConfig,
                   gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Copy spans from >= ``recall_distance`` earlier into a ``recall_prob`` share of windows;
    return them and a bool mask [n, t-1] of the *targets* a copy makes predictable.

    The copy lands beyond the sliding window of its source, so predicting it needs the
    global KV. Draws come from ``gen`` in a fixed order: same generator state, same result.
    Target ``j`` predicts ``windows[:, j+1]``; a copy at ``[dst, dst+span)`` makes its bytes
    from ``dst+1`` on predictable (its first byte is not: nothing says a copy starts there).
    """
    n, t = windows.shape
    lo, hi = tc.recall_span
    mask = torch.zeros(n, max(t - 1, 0), dtype=torch.bool)
    out = windows.clone() if tc.recall_prob else windows
    for _ in range(tc.recall_copies):
        pick = torch.rand(n, generator=gen) < tc.recall_prob
        spans = torch.randint(lo, hi + 1, (n,), generator=gen)
        u = torch.rand(n, 2, generator=gen)
        if not tc.recall_prob:  # one draw even so: the generator's stream stays that of earlier runs
            return windows, mask
        for i in range(n):
            span = int(spans[i])
            room = t - tc.recall_distance - 2 * span
            if not pick[i] or room <= 0:
                continue
            src = int(u[i, 0] * room)
            dst = src + span + tc.recall_distance + int(u[i, 1] * (room - src))
            out[i, dst:dst + span] = out[i, src:src + span]
            mask[i, dst:dst + span - 1] = True
    return out, mask


def loss_on(model: EncoderDecoder, windows: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
    """Mean next-byte loss of ``windows``; with ``weight`` [n, t-1], the weighted mean."""
    logits = model.forward_batched(windows[:, :-1])
    if weight is None:
        return F.cross_entropy(logits.flatten(0, 1).float(), windows[:, 1:].flatten())
    per = F.cross_entropy(logits.flatten(0, 1).float(), windows[:, 1:].flatten(), reduction="none")
    w = weight.flatten().to(per.dtype)
    return (per * w).sum() / w.sum()


@torch.no_grad()
def evaluate(model: EncoderDecoder, windows: torch.Tensor, batch: int = 8) -> float:
    model.eval()
    losses = [loss_on(model, windows[i:i + batch]).item() for i in range(0, windows.shape[0], batch)]
    model.train()
    return float(sum(losses) / len(losses))


def lr_at(step: int, tc: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    frac = (step - tc.warmup) / max(1, tc.steps - tc.warmup)
    return tc.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


#: Settings a later stage may turn on over its init checkpoint, and the weight names each adds
#: (any name containing the fragment); those weights start fresh.
STAGE_ADDABLE = {"cross_recency": ".cross.recency"}


def _optimizer(model: EncoderDecoder, tc: TrainConfig) -> torch.optim.AdamW:
    """AdamW with no weight decay on vectors, and the small scalar parameters at ``scalar_lr_mult``."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2 and p.numel() > 8]
    scalars = [p for p in model.parameters() if p.ndim < 2 and p.numel() <= 8]
    return torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay, "lr_mult": 1.0},
                              {"params": no_decay, "weight_decay": 0.0, "lr_mult": 1.0},
                              {"params": scalars, "weight_decay": 0.0, "lr_mult": tc.scalar_lr_mult}],
                             lr=tc.lr, betas=(0.9, 0.95))


def _train_step(model: EncoderDecoder, opt: torch.optim.Optimizer, train_bytes: torch.Tensor, tc: TrainConfig,
                step: int, gen: torch.Generator) -> tuple[torch.Tensor, int]:
    """One optimizer step on a fresh batch at this step's shape; returns its loss and sequence length."""
    for g in opt.param_groups:
        g["lr"] = lr_at(step, tc) * g["lr_mult"]
    batch, seq_len = tc.shape_at(step)
    windows, copied = recall_augment(sample_windows(train_bytes, batch, seq_len, gen), tc, gen)
    weight = 1.0 + (tc.recall_weight - 1.0) * copied.float() if tc.recall_weight != 1.0 else None
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=tc.amp):
        loss = loss_on(model, windows, weight)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
    opt.step()
    return loss, seq_len


def _initial_model(cfg: ModelConfig,
                   init_from: Path | None) -> tuple[EncoderDecoder, tuple[Path, dict] | None]:
    """A fresh model, or one holding a checkpoint's weights (a second training stage), with that
    checkpoint's path and record. Only modules of :data:`STAGE_ADDABLE` settings that this stage
    turns on (and the init lacks) may be missing from the checkpoint; they start fresh."""
    model = EncoderDecoder(cfg)
    if init_from is None:
        return model, None
    init_model, init_record = load_checkpoint(init_from, expect_preset=cfg.name)
    old, new = init_model.cfg.to_dict(), cfg.to_dict()
    differ = sorted(k for k in new if k not in ("window", "replay") and old.get(k) != new[k])
    fresh = tuple(STAGE_ADDABLE[k] for k in differ if k in STAGE_ADDABLE and not old.get(k))
    other = [k for k in differ if k not in STAGE_ADDABLE or old.get(k)]
    if other:
        raise ValueError(f"--init {init_from}: its model differs from this stage's in {other}; a stage may only "
                         f"add {sorted(STAGE_ADDABLE)}")
    result = model.load_state_dict(init_model.state_dict(), strict=False)
    bad = [k for k in result.missing_keys if not any(f in k for f in fresh)] + list(result.unexpected_keys)
    if bad:
        raise ValueError(f"--init {init_from}: weights do not fit this stage's model: {bad[:3]}")
    return model, (init_from, init_record)


def _record(cfg: ModelConfig, tc: TrainConfig, corpus: Corpus, model: EncoderDecoder,
            evals: tuple[torch.Tensor, torch.Tensor], history: list[float], heldout_curve: list[dict],
            t0: float, stage: tuple[Path, dict] | None) -> dict:
    """What the checkpoint keeps about the run: settings, corpus, final losses, the curves and the
    stage it started from, if any, so that the token count covers every stage."""
    train_eval, held = evals
    record = {
        "model": cfg.to_dict(), "train": asdict(tc), "corpus": corpus.description, "params": model.num_params,
        "tokens_seen": tc.tokens_seen(tc.steps),
        "final_train_loss_nats": evaluate(model, train_eval), "final_heldout_loss_nats": evaluate(model, held),
        "last_batch_loss_nats": history[-1], "loss_history": history, "heldout_curve": heldout_curve,
        "seconds": time.perf_counter() - t0, "threads": tc.threads,
    }
    if stage is not None:
        init_from, init_record = stage
        record["init_from"] = str(init_from)
        record["previous_stage"] = {k: v for k, v in init_record.items() if k != "loss_history"}
        record["tokens_seen_all_stages"] = record["tokens_seen"] + init_record.get(
            "tokens_seen_all_stages", init_record.get("tokens_seen", 0))
    return record


def train(cfg: ModelConfig, tc: TrainConfig, corpus: Corpus | None = None, log=print, progress: bool = True,
          resume_from: Path | None = None, stop_after: int | None = None,
          init_from: Path | None = None) -> tuple[EncoderDecoder, dict]:
    """Train ``cfg`` on the stdlib corpus; returns the model and a record of the run.

    With ``resume_from`` (the final checkpoint path), the full training state (weights,
    optimizer, data generator, loss history) is saved to ``<name>.partial.pt`` every
    ``save_every`` steps, and a run with the same settings continues from it: an interrupted
    run resumed gives the same weights as one never interrupted. ``stop_after`` ends this call
    after that many steps (the run is then resumable, as if interrupted; record is None).
    """
    torch.set_num_threads(tc.threads)
    corpus = corpus or load_corpus(tc.heldout_every)
    torch.manual_seed(tc.seed)
    model, stage = _initial_model(cfg, init_from)
    gen = torch.Generator().manual_seed(tc.seed)
    eval_gen = torch.Generator().manual_seed(tc.seed + 1)
    held = sample_windows(corpus.heldout, tc.eval_windows, min(512, tc.seq_len), eval_gen)
    train_eval = sample_windows(corpus.train, tc.eval_windows, min(512, tc.seq_len), eval_gen)
    opt = _optimizer(model, tc)
    partial = None if resume_from is None else partial_path(resume_from)
    state = _resume(partial, cfg, tc, model, opt, gen, log)
    history, heldout_curve, first = state["history"], state["heldout_curve"], state["step"]
    t0 = time.perf_counter() - state["seconds"]
    iterator = tqdm(range(first, tc.steps), desc=f"train {cfg.name}", unit="step", initial=first, total=tc.steps,
                    disable=not progress)
    model.train()
    for step in iterator:
        if stop_after is not None and step >= first + stop_after:
            return model, None
        loss, seq_len = _train_step(model, opt, corpus.train, tc, step, gen)
        history.append(loss.item())
        iterator.set_postfix(loss=f"{history[-1]:.3f}", seq=seq_len)
        if tc.eval_every and (step + 1) % tc.eval_every == 0:
            heldout_curve.append({"step": step + 1, "tokens": tc.tokens_seen(step + 1),
                                  "heldout_nats_per_byte": evaluate(model, held)})
        if log and (step % 25 == 0 or step == tc.steps - 1):
            log(f"step {step:5d}  loss {history[-1]:.4f}  lr {lr_at(step, tc):.2e}  seq {seq_len}  "
                f"{time.perf_counter() - t0:.0f}s")
        if partial is not None and ((step + 1) % tc.save_every == 0 or step == tc.steps - 1):
            _save_partial(partial, cfg, tc, model, opt, gen,
                          {**state, "step": step + 1, "seconds": time.perf_counter() - t0})
    record = _record(cfg, tc, corpus, model, (train_eval, held), history, heldout_curve, t0, stage)
    model.train(False)
    return model, record


def _save_partial(partial: Path, cfg: ModelConfig, tc: TrainConfig, model: EncoderDecoder,
                  opt: torch.optim.Optimizer, gen: torch.Generator, state: dict) -> None:
    """Write the full training state under a temporary name and rename it into place, so that an
    interrupted save never leaves a torn file for the next run to resume from."""
    tmp = partial.with_suffix(".tmp")
    torch.save({"model": cfg.to_dict(), "train": asdict(tc), "state_dict": model.state_dict(),
                "opt": opt.state_dict(), "gen": gen.get_state(), **state}, tmp)
    tmp.replace(partial)


def _resume(partial: Path | None, cfg: ModelConfig, tc: TrainConfig, model: EncoderDecoder,
            opt: torch.optim.Optimizer, gen: torch.Generator, log) -> dict:
    """Load a partial run's weights, optimizer and generator (refusing one saved with other settings);
    the loop's state to continue from, a fresh one when there is nothing to resume."""
    if partial is None or not partial.exists():
        return {"history": [], "heldout_curve": [], "step": 0, "seconds": 0.0}
    blob = torch.load(partial, map_location="cpu", weights_only=False)
    if blob["model"] != cfg.to_dict() or blob["train"] != asdict(tc):
        raise ValueError(f"{partial}: saved by a run with other settings; delete it or use the same settings")
    model.load_state_dict(blob["state_dict"])
    opt.load_state_dict(blob["opt"])
    gen.set_state(blob["gen"])
    if log:
        log(f"resuming {partial} at step {blob['step']}")
    return {k: blob[k] for k in ("history", "heldout_curve", "step", "seconds")}


def train_preset(name: str, resume_from: Path | None = None, init_from: Path | None = None,
                 **overrides) -> tuple[EncoderDecoder, dict]:
    if name not in TRAIN_PRESETS:
        raise ValueError(f"train preset: must be one of {sorted(TRAIN_PRESETS)}, got {name!r}")
    tc = replace(TRAIN_PRESETS[name], **overrides)
    return train(preset(MODEL_OF[name], **MODEL_SETTINGS.get(name, {})), tc, resume_from=resume_from,
                 init_from=init_from)
