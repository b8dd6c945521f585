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

from tiered_kv.model import BOS, EOS, EncoderDecoder, ModelConfig, preset


@dataclass(frozen=True)
class TrainConfig:
    """Optimizer and data settings; ``steps`` x ``batch`` x ``seq_len`` tokens are seen."""

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

    def __post_init__(self) -> None:
        for name in ("steps", "batch", "seq_len", "warmup", "heldout_every", "eval_windows", "threads"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"TrainConfig.{name}: must be an integer >= 1, got {v!r}")
        if not 0 < self.lr < 1:
            raise ValueError(f"TrainConfig.lr: must be in (0, 1), got {self.lr!r}")
        if self.weight_decay < 0 or self.grad_clip <= 0:
            raise ValueError("TrainConfig.weight_decay must be >= 0 and grad_clip > 0")


TRAIN_PRESETS: dict[str, TrainConfig] = {
    "tiny": TrainConfig(steps=60, batch=8, seq_len=128, lr=3e-3, warmup=5, eval_windows=8),
    "small": TrainConfig(steps=200, batch=4, seq_len=512, warmup=10),
}


@dataclass(frozen=True)
class Corpus:
    """Token streams (int16: 256 bytes + BOS/EOS) for training and held-out evaluation."""

    train: torch.Tensor
    heldout: torch.Tensor
    description: dict


def stdlib_files(root: Path | None = None) -> list[Path]:
    """Every ``.py`` file of the standard library (not site-packages), sorted by relative path."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    files = [p for p in root.rglob("*.py") if "site-packages" not in p.parts and p.is_file()]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def load_corpus(heldout_every: int = 20, root: Path | None = None, max_bytes: int | None = None,
                heldout_only: bool = False) -> Corpus:
    """Read the stdlib sources into BOS/EOS-delimited byte streams with a held-out split.

    ``heldout_only`` skips reading the training files (fast evaluation); ``max_bytes`` stops
    after that many source bytes have been read.
    """
    files = stdlib_files(root)
    if not files:
        raise FileNotFoundError(f"no .py files under {root or sysconfig.get_paths()['stdlib']}")
    train_parts, held_parts, n_bytes = [], [], 0
    for i, path in enumerate(files):
        if heldout_only and i % heldout_every:
            continue
        data = path.read_bytes()
        n_bytes += len(data)
        t = torch.empty(len(data) + 2, dtype=torch.int16)
        t[0], t[-1] = BOS, EOS
        t[1:-1] = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int16) if data else t[1:-1]
        (held_parts if i % heldout_every == 0 else train_parts).append(t)
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


def loss_on(model: EncoderDecoder, windows: torch.Tensor) -> torch.Tensor:
    logits = model.forward_batched(windows[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1).float(), windows[:, 1:].flatten())


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


def train(cfg: ModelConfig, tc: TrainConfig, corpus: Corpus | None = None, log=print, progress: bool = True,
          ) -> tuple[EncoderDecoder, dict]:
    """Train ``cfg`` on the stdlib corpus; returns the model and a record of the run."""
    torch.set_num_threads(tc.threads)
    corpus = corpus or load_corpus(tc.heldout_every)
    torch.manual_seed(tc.seed)
    model = EncoderDecoder(cfg)
    gen = torch.Generator().manual_seed(tc.seed)
    eval_gen = torch.Generator().manual_seed(tc.seed + 1)
    held = sample_windows(corpus.heldout, tc.eval_windows, tc.seq_len, eval_gen)
    train_eval = sample_windows(corpus.train, tc.eval_windows, tc.seq_len, eval_gen)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tc.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=tc.lr, betas=(0.9, 0.95))
    history = []
    t0 = time.perf_counter()
    iterator = range(tc.steps)
    if progress:
        from tqdm import tqdm

        iterator = tqdm(iterator, desc=f"train {cfg.name}", unit="step")
    model.train()
    for step in iterator:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, tc)
        loss = loss_on(model, sample_windows(corpus.train, tc.batch, tc.seq_len, gen))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        history.append(loss.item())
        if progress:
            iterator.set_postfix(loss=f"{loss.item():.3f}")
        if log and (step % 25 == 0 or step == tc.steps - 1):
            log(f"step {step:5d}  loss {loss.item():.4f}  lr {lr_at(step, tc):.2e}  "
                f"{time.perf_counter() - t0:.0f}s")
    record = {
        "model": cfg.to_dict(),
        "train": asdict(tc),
        "corpus": corpus.description,
        "params": model.num_params,
        "final_train_loss_nats": evaluate(model, train_eval),
        "final_heldout_loss_nats": evaluate(model, held),
        "last_batch_loss_nats": history[-1],
        "loss_history": history,
        "seconds": time.perf_counter() - t0,
        "threads": tc.threads,
    }
    model.eval()
    return model, record


def train_preset(name: str, **overrides) -> tuple[EncoderDecoder, dict]:
    tc = replace(TRAIN_PRESETS[name], **overrides)
    return train(preset(name), tc)
