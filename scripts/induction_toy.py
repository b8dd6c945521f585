"""Which part of tiered-kv's model slows the forming of induction (copy) heads? (issue 12)

The task: random tokens from a 16-symbol vocabulary, T=128, one span of 8-16 tokens copied
>= 20 positions later in each sequence, and loss *only* on the copied targets that are
predictable (every copied token but the first). A model that cannot copy sits at ln 16 =
2.77 nats; one that has formed an induction head falls well below it. The recorded "hit" is
the first step whose batch copy loss is below ``--threshold`` (2.4 nats).

Variants are selected by name. ``standard`` is a plain PyTorch 2-layer causal transformer
(learned absolute positions, LayerNorm, ReLU MLP, untied output Linear, PyTorch's default
init): the control that forms induction in a few hundred steps. ``tiered`` is the committed
tiny preset with window=T+1, so its decoder's self-attention sees the whole sequence and
ordinary induction inside the decoder is possible. Every other ``tiered-*`` variant changes
one factor of ``tiered`` by wrapping or replacing modules here, so tiered_kv/model.py needs
no edit to try it. ``standard-*`` variants move one of tiered-kv's choices into the control;
``layers-*`` variants rebuild the control from tiered-kv's own decoder blocks.

Results for each variant (copy-loss curve: the mean batch copy loss of each 50 steps, the hit
step, settings, the command) are merged into ``--out`` (JSON), so variants can be run one
process at a time; ``--render`` writes the Markdown table from that JSON only.

    python scripts/induction_toy.py --variants standard,tiered --steps 1000
    python scripts/induction_toy.py --render
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tiered_kv import model as tkm  # noqa: E402

VOCAB = 16
T = 128
BATCH = 32
SPAN = (8, 16)
MIN_DIST = 20
CURVE_EVERY = 50


# --------------------------------------------------------------------------- task

def make_batch(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens [B, T+1] with one copied span each, and the mask [B, T] of predictable targets."""
    x = torch.randint(0, VOCAB, (BATCH, T + 1), generator=gen)
    mask = torch.zeros(BATCH, T, dtype=torch.bool)
    for i in range(BATCH):
        span = int(torch.randint(SPAN[0], SPAN[1] + 1, (1,), generator=gen))
        dist = int(torch.randint(MIN_DIST, T - 2 * span, (1,), generator=gen))
        src = int(torch.randint(0, T - dist - span, (1,), generator=gen))
        x[i, src + dist:src + dist + span] = x[i, src:src + span]
        # target at input position p is x[p+1]; copies x[src+1 ..] are predictable
        mask[i, src + dist:src + dist + span - 1] = True
    return x, mask


# --------------------------------------------------------------------------- the control

def _check_factors(family: str, factors: tuple[str, ...], known: tuple[str, ...]) -> None:
    """Refuse a variant name with a factor its family does not have, naming the known ones."""
    bad = [f for f in factors if f not in known]
    if bad:
        raise ValueError(f"--variants: unknown {family} factor(s) {bad}; known: {list(known)}")


class Standard(nn.Module):
    """2-layer pre-norm causal nn.TransformerEncoder, d 64, 2 heads, learned positions.

    ``factors`` move one of tiered-kv's choices into the control: ``tied`` (output = the token
    embedding transposed, no bias), ``nobias`` (no bias in any Linear or norm), ``rmsnorm``,
    ``gelu``, ``init02`` (every weight normal std 0.02 as tiered-kv does, biases 0),
    ``embed02`` (only the token and position embeddings at std 0.02), ``v258`` (the output
    and embedding over tiered-kv's 258-token vocabulary; the task still uses 16).
    """

    FACTORS = ("tied", "nobias", "rmsnorm", "gelu", "init02", "embed02", "v258")

    def __init__(self, factors: tuple[str, ...] = ()):
        super().__init__()
        _check_factors("standard", factors, self.FACTORS)
        vocab = tkm.VOCAB_SIZE if "v258" in factors else VOCAB
        bias = "nobias" not in factors
        self.e = nn.Embedding(vocab, 64)
        self.p = nn.Embedding(T, 64)
        layer = nn.TransformerEncoderLayer(64, 2, 128, 0.0, activation="gelu" if "gelu" in factors else "relu",
                                           batch_first=True, norm_first=True, bias=bias)
        self.layers = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        if "rmsnorm" in factors:
            _replace_modules(self.layers, nn.LayerNorm, lambda n: nn.RMSNorm(n.normalized_shape, eps=n.eps))
        self.o = nn.Linear(64, vocab, bias=bias and "tied" not in factors)
        if "init02" in factors:
            for name, w in self.named_parameters():
                if name.endswith("bias"):
                    nn.init.zeros_(w)
                elif w.ndim == 2:
                    nn.init.normal_(w, std=0.02)
        if "embed02" in factors:
            nn.init.normal_(self.e.weight, std=0.02)
            nn.init.normal_(self.p.weight, std=0.02)
        if "tied" in factors:
            self.o.weight = self.e.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        h = self.e(x) + self.p(torch.arange(t))
        return self.o(self.layers(h, mask=mask, is_causal=True))


class Layers(nn.Module):
    """The control rebuilt from tiered-kv's own decoder blocks (:class:`tiered_kv.model.SWALayer`).

    Two ``SWALayer`` (rotary self-attention over the whole sequence, RMSNorm, SwiGLU, no bias,
    no cross-attention), a token embedding with PyTorch's N(0, 1) init and an untied output
    Linear with its default init, so the attention code and block of the model are under test
    and the parts around them are the control's. ``factors``: ``fnorm`` (a LayerNorm before the
    output, as the model's ``dec_norm``), ``v258`` (embedding and output over 258 tokens),
    ``emb02`` (the embedding at std 0.02, as the model's init), ``lin02`` (every Linear at std
    0.02), ``tied`` (the output is the embedding transposed, as in the model).
    """

    FACTORS = ("fnorm", "v258", "emb02", "lin02", "tied")

    def __init__(self, factors: tuple[str, ...] = ()):
        super().__init__()
        _check_factors("layers", factors, self.FACTORS)
        vocab = tkm.VOCAB_SIZE if "v258" in factors else VOCAB
        cfg = tkm.preset("tiny", window=T + 1)
        self.e = nn.Embedding(vocab, cfg.d_model)
        self.blocks = nn.ModuleList(tkm.SWALayer(cfg, cross=False) for _ in range(2))
        self.norm = nn.LayerNorm(cfg.d_model) if "fnorm" in factors else nn.Identity()
        self.o = nn.Linear(cfg.d_model, vocab, bias="tied" not in factors)
        if "lin02" in factors:
            for mod in self.modules():
                if isinstance(mod, nn.Linear):
                    nn.init.normal_(mod.weight, std=0.02)
        if "emb02" in factors:
            nn.init.normal_(self.e.weight, std=0.02)
        if "tied" in factors:
            self.o.weight = self.e.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.e(x)
        for block in self.blocks:
            h, _ = block(h, 0, None, T + 1, 0)
        return self.o(self.norm(h))


# --------------------------------------------------------------------------- tiered factors

def _init_like_model(module: nn.Module) -> nn.Module:
    """New weights get the model's own init (normal, std 0.02), so only the factor changes."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
    return module


def _replace_modules(root: nn.Module, kind: type, make: Callable[[nn.Module], nn.Module]) -> None:
    for parent in list(root.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, kind):
                setattr(parent, name, make(child))


def untie(m: tkm.EncoderDecoder) -> None:
    """A separate output Linear after dec_norm instead of the transposed token embedding."""
    m.head = _init_like_model(nn.Linear(m.cfg.d_model, m.cfg.vocab_size, bias=False))
    m._logits = lambda h: m.head(m.dec_norm(h))


class _EmbedWithPositions(nn.Module):
    """Token embedding plus a learned absolute position; ``weight`` stays the token table."""

    def __init__(self, tok: nn.Embedding, d: int):
        super().__init__()
        self.tok = tok
        self.pos = _init_like_model(nn.Embedding(T, d))

    @property
    def weight(self) -> torch.Tensor:
        return self.tok.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.tok(tokens) + self.pos(torch.arange(tokens.shape[-1]))


def abspos(m: tkm.EncoderDecoder) -> None:
    """No rotary anywhere (self- and cross-attention); learned positions added at both inputs."""
    def qkv_no_rope(self, x, positions):
        c = self.cfg
        return (self.wq(x).unflatten(-1, (c.n_heads, c.head_dim)),
                self.wk(x).unflatten(-1, (c.kv_heads, c.head_dim)),
                self.wv(x).unflatten(-1, (c.kv_heads, c.head_dim)))

    for layer in [*m.encoder, *m.decoder]:
        layer.attn._qkv = qkv_no_rope.__get__(layer.attn)
    m.embed = _EmbedWithPositions(m.embed, m.cfg.d_model)


def layernorm(m: tkm.EncoderDecoder) -> None:
    _replace_modules(m, nn.RMSNorm, lambda n: nn.LayerNorm(n.normalized_shape, eps=m.cfg.norm_eps))


class _GeluMLP(nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


def gelu(m: tkm.EncoderDecoder) -> None:
    _replace_modules(m, tkm.MLP, lambda _: _init_like_model(_GeluMLP(m.cfg.d_model, m.cfg.mlp_hidden)))


def nocross(m: tkm.EncoderDecoder) -> None:
    """Drop the decoder's cross-attention: the decoder alone is a 2-layer causal transformer."""
    for layer in m.decoder:
        layer.cross = None
        layer.norm_c = None


def torch_init_linear(m: tkm.EncoderDecoder) -> None:
    """Every Linear gets PyTorch's default init (uniform, std 1/sqrt(3*fan_in) = 0.072 at d 64)."""
    for mod in m.modules():
        if isinstance(mod, nn.Linear):
            mod.reset_parameters()


def embed_std1(m: tkm.EncoderDecoder) -> None:
    """Token embedding N(0, 1) (PyTorch's default) instead of std 0.02."""
    nn.init.normal_(m.embed.weight, std=1.0)


class _ScaledEmbed(nn.Module):
    """Token embedding times ``scale`` at the inputs; ``weight`` (the tied head) unscaled."""

    def __init__(self, tok: nn.Module, scale: float):
        super().__init__()
        self.tok = tok
        self.scale = scale

    @property
    def weight(self) -> torch.Tensor:
        return self.tok.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.tok(tokens) * self.scale


def embed_x50(m: tkm.EncoderDecoder) -> None:
    """Inputs see the token embedding times 50 (= 1/0.02, i.e. std 1); the tied head does not."""
    m.embed = _ScaledEmbed(m.embed, 50.0)


def small_out(m: tkm.EncoderDecoder) -> None:
    """Residual output projections (attention wo, MLP down) at std 0.02/sqrt(2 * layers)."""
    std = 0.02 / math.sqrt(2 * (m.cfg.enc_layers + m.cfg.dec_layers))
    for mod in m.modules():
        if isinstance(mod, (tkm.SelfAttention, tkm.CrossAttention)):
            nn.init.normal_(mod.wo.weight, std=std)
        elif isinstance(mod, tkm.MLP):
            nn.init.normal_(mod.down.weight, std=std)


FACTORS: dict[str, Callable[[tkm.EncoderDecoder], None]] = {
    "untied": untie, "abspos": abspos, "layernorm": layernorm, "gelu": gelu, "nocross": nocross,
    "torchinit": torch_init_linear, "embed1": embed_std1, "embedx50": embed_x50, "smallout": small_out,
}
#: preset overrides a factor needs (abspos: the cross-attention loses rotary too)
FACTOR_CONFIG = {"abspos": {"cross_rope": False}, "kv2": {"kv_heads": 2}, "crossnorope": {"cross_rope": False},
                  "smear": {"cross_smear": True}, "w8": {"window": 8}}


def build(variant: str) -> tuple[nn.Module, Callable[[torch.Tensor], torch.Tensor]]:
    """Model and its forward (tokens [B,T] -> logits [B,T,V>=16]) for a variant name.

    ``tiered`` plus ``-factor`` suffixes (applied in order), e.g. ``tiered-untied-abspos``;
    ``standard`` plus ``-factor`` suffixes (see :class:`Standard`), e.g. ``standard-tied``;
    ``layers`` plus suffixes (see :class:`Layers`), e.g. ``layers-fnorm-v258``.
    """
    head, *factors = variant.split("-")
    if head == "standard":
        m = Standard(tuple(factors))
        return m, m
    if head == "layers":
        m = Layers(tuple(factors))
        return m, m
    if head != "tiered":
        raise ValueError(f"--variants: names start with 'standard', 'layers' or 'tiered', got {variant!r}")
    known = set(FACTORS) | set(FACTOR_CONFIG)
    bad = [f for f in factors if f not in known]
    if bad:
        raise ValueError(f"--variants: unknown factor(s) {bad} in {variant!r}; known: {sorted(known)}")
    overrides: dict = {"window": T + 1}
    for f in factors:
        overrides.update(FACTOR_CONFIG.get(f, {}))
    m = tkm.EncoderDecoder(tkm.preset("tiny", **overrides))
    for f in factors:
        if f in FACTORS:
            FACTORS[f](m)
    return m, m.forward_batched


# --------------------------------------------------------------------------- experiment

def run_variant(variant: str, steps: int, seed: int, lr: float, threshold: float,
                stop_after_hit: int, give_up_at: int, give_up_above: float) -> dict:
    """Train one variant on the copy task; returns its curve and the first step below threshold.

    Stops early ``stop_after_hit`` steps after the hit, or at step ``give_up_at`` when the last
    50 steps' mean copy loss is still above ``give_up_above`` (still at chance).
    """
    torch.manual_seed(seed)
    m, fwd = build(variant)
    m.train()
    opt = torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(seed + 1)
    losses: list[float] = []
    curve: list[dict] = []
    hit = None
    stopped = "steps"
    t0 = time.time()
    for step in range(steps):
        x, mask = make_batch(gen)
        logits = fwd(x[:, :-1])
        per = F.cross_entropy(logits.flatten(0, 1).float(), x[:, 1:].flatten(), reduction="none")
        loss = per.view(BATCH, T)[mask].mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if hit is None and losses[-1] < threshold:
            hit = step
        if (step + 1) % CURVE_EVERY == 0:
            mean = sum(losses[-CURVE_EVERY:]) / CURVE_EVERY
            curve.append({"step": step + 1, "copy_loss": round(mean, 4)})
            print(f"{variant} step {step + 1} copy {mean:.3f} {time.time() - t0:.0f}s", flush=True)
            if hit is None and step + 1 >= give_up_at and mean > give_up_above:
                stopped = f"gave up: mean copy loss {mean:.3f} > {give_up_above} at step {step + 1}"
                break
        if hit is not None and step >= hit + stop_after_hit and (step + 1) % CURVE_EVERY == 0:
            stopped = f"{stop_after_hit} steps after the hit"
            break
    return {"variant": variant, "hit_step": hit, "steps_run": len(losses), "stopped": stopped,
            "final_copy_loss": curve[-1]["copy_loss"] if curve else None, "curve": curve,
            "params": sum(p.numel() for p in m.parameters()), "seconds": round(time.time() - t0, 1)}


def render(data: dict) -> str:
    s = data["settings"]
    lines = [
        "# Induction toy: steps until the copy loss falls below "
        f"{s['threshold']} nats (issue 12)",
        "",
        f"Written by `scripts/induction_toy.py --render` from `induction_toy.json`. Task: {s['task']}",
        f"Training: {s['training']}",
        "",
        "| variant | first step < threshold | copy loss @200 | @500 | @1000 | last (step) | stopped |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in data["variants"].items():
        at = {p["step"]: p["copy_loss"] for p in r["curve"]}
        cell = [f"{at[k]:.3f}" if k in at else "-" for k in (200, 500, 1000)]
        last = f"{r['final_copy_loss']:.3f} ({r['curve'][-1]['step']})" if r["curve"] else "-"
        hit = "never" if r["hit_step"] is None else str(r["hit_step"])
        lines.append(f"| `{name}` | {hit} | {' | '.join(cell)} | {last} | {r['stopped']} |")
    lines += ["", "Commands:", ""] + [f"- `{c}`" for c in data.get("commands", [])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default="standard,tiered,tiered-untied")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--threshold", type=float, default=2.4)
    ap.add_argument("--stop-after-hit", type=int, default=300)
    ap.add_argument("--give-up-at", type=int, default=700)
    ap.add_argument("--give-up-above", type=float, default=2.74)
    ap.add_argument("--out", type=Path, default=REPO / "data" / "checkpoints" / "induction_toy.json")
    ap.add_argument("--render", action="store_true", help="only write the .md table from --out")
    a = ap.parse_args(argv)
    md = a.out.with_suffix(".md")
    if a.render:
        md.write_text(render(json.loads(a.out.read_text())))
        print(f"wrote {md}")
        return
    torch.set_num_threads(1)
    names = [v.strip() for v in a.variants.split(",") if v.strip()]
    for v in names:
        build(v)  # refuse a bad name before any training
    settings = {
        "task": f"random tokens from {VOCAB} symbols, T={T}, batch {BATCH}, one span of "
                f"{SPAN[0]}-{SPAN[1]} tokens copied >= {MIN_DIST} positions later; loss only on the "
                "predictable copied targets; chance = ln 16 = 2.773 nats; hit = first step whose batch "
                "copy loss is below the threshold; curve = mean batch copy loss per 50 steps.",
        "training": f"AdamW lr {a.lr}, betas (0.9, 0.95), no weight decay, grad clip 1.0, seed {a.seed}, "
                    f"up to {a.steps} steps; stop {a.stop_after_hit} steps after the hit, or at step "
                    f"{a.give_up_at} if the 50-step mean is still > {a.give_up_above}.",
        "threshold": a.threshold, "seed": a.seed, "lr": a.lr, "steps": a.steps,
    }
    data = json.loads(a.out.read_text()) if a.out.is_file() else {"variants": {}, "commands": []}
    if data.get("settings", settings) != settings:
        raise ValueError(f"--out {a.out}: was written with other settings; use another --out")
    data["settings"] = settings
    cmd = "python scripts/induction_toy.py " + " ".join(shlex.quote(x) for x in (argv or sys.argv[1:]))
    for v in names:
        data["variants"][v] = run_variant(v, a.steps, a.seed, a.lr, a.threshold, a.stop_after_hit,
                                          a.give_up_at, a.give_up_above)
        data["variants"][v]["command"] = cmd
        if cmd not in data["commands"]:
            data["commands"].append(cmd)
        a.out.write_text(json.dumps(data, indent=1) + "\n")
        md.write_text(render(data))
    print(f"wrote {a.out} and {md}")


if __name__ == "__main__":
    main()
