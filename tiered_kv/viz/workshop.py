"""Workshop exercises: predict, move the slider, then check the prediction against the model.

Each :class:`Exercise` names a question, the dashboard to explore it with, the unit of its answer
and a tolerance. The expected answer is never typed in: :func:`expected` computes it from the
package at the notebook's size, so a change in the model changes the answer key with it.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Exercise:
    id: str
    question: str
    explore: str  # what to do with which slider
    unit: str  # "fraction", "tokens", "bytes/token", "x", "yes/no"
    tolerance: float  # absolute for fractions, relative otherwise; 0 = exact
    why: str  # shown after a correct answer


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        "ttl-5min",
        "On the real conversation trace, what token hit rate does a 5-minute TTL give (a fraction, e.g. 0.25)?",
        "notebook 03: move the TTL slider of the real trace to 300 s and read the hit rate.",
        "fraction", 0.02,
        "Most conversation turns come back within minutes, so a few minutes of retention already "
        "catch most of what infinite retention would.",
    ),
    Exercise(
        "ttl-shorter-never-helps",
        "Can shortening the chatbot TTL ever raise the chatbot's hit rate (yes or no)?",
        "notebook 03: on the synthetic workload, sweep the chatbot TTL down and watch its hit rate.",
        "yes/no", 0.0,
        "Under TTL alone a block present at a shorter TTL is present at any longer one, so the "
        "hit rate can only fall as the TTL shrinks.",
    ),
    Exercise(
        "capacity-half",
        "On the real trace with unlimited TTL, what is the smallest SSD capacity (tokens) that reaches "
        "half of the unbounded-capacity hit rate?",
        "notebook 03: slide the SSD capacity down until the total hit rate halves.",
        "tokens", 0.35,
        "LRU hit rate grows with the log of capacity over a wide range: half the benefit needs far "
        "less than half the footprint.",
    ),
    Exercise(
        "fp4-v3-bytes",
        "How many bytes per token does DeepSeek-V3's MLA KV cache take in MXFP4?",
        "the DeepSeek-V3 rows of the bytes-per-token table (all rows in notebook 02): "
        "61 layers x (512 + 64) elements x 4.25 bits.",
        "bytes/token", 0.01,
        "MXFP4 stores 4 bits per element plus one 8-bit scale per 32 elements: 4.25 bits.",
    ),
    Exercise(
        "hit-speedup-128k",
        "On an idle machine, how many times faster is the first token of a 128K-token prompt when its "
        "prefix is a cache hit (load + replay) than when it is recomputed?",
        "notebook 04: the 'hit vs miss, no queueing' chart at 131,072 tokens.",
        "x", 0.10,
        "A miss pays attention over the whole prompt (quadratic); a hit pays the KV read, the new "
        "block and a bounded replay.",
    ),
    Exercise(
        "replay-exact-small",
        "For the 'small' model preset, how many tokens must bounded replay cover to be exact?",
        "notebook 01: the exact bound R >= L*(W-1)+1 (layers per stack and window from the preset).",
        "tokens", 0.0,
        "Each sliding-window layer reaches W-1 tokens further back; L stacked layers reach L*(W-1).",
    ),
    Exercise(
        "volatile-depth-half",
        "A per-call line (a timestamp, a request id) sits at the same depth in every prompt. How deep "
        "(tokens from the top) must it sit for the synthetic agent class to keep at least half of its "
        "hit rate without the line?",
        "notebook 06: slide the depth of the per-call line until the agent's rate under the slider "
        "reaches half of its 'no line' rate.",
        "tokens", 0.25,
        "Block ids are chained, so every block from the line down is unique to the call: a class keeps "
        "only the hits above the line. Agent calls share system prompts and tool definitions of about "
        "6K tokens, so a line inside them cuts the hit where it sits; at the end of the prompt the "
        "line costs about one block.",
    ),
)

_BY_ID = {e.id: e for e in EXERCISES}


def exercise(exercise_id: str) -> Exercise:
    if exercise_id not in _BY_ID:
        raise ValueError(f"exercise_id: must be one of {sorted(_BY_ID)}, got {exercise_id!r}")
    return _BY_ID[exercise_id]


@lru_cache(maxsize=8)
def _table(kind: str, size: str):
    from tiered_kv.viz import retention

    return getattr(retention, f"{kind}_table")(size)


def expected(exercise_id: str, size: str | None = None) -> float | bool:
    """The answer the package computes for ``exercise_id`` at ``size`` (default: notebook size)."""
    from tiered_kv.sim.retention import settings as R
    from tiered_kv.viz import notebook_size

    size = notebook_size(size)
    ex = exercise(exercise_id)
    if ex.id == "ttl-5min":
        table = _table("conversation", size)
        return float(R.hit_rates(table, R.Setting((300.0,)))["token_hit_rate"][-1])
    if ex.id == "ttl-shorter-never-helps":
        table = _table("synthetic", size)
        curves = R.ttl_curves(table, table.default_setting(), R.ttl_grid(table))
        import polars as pl

        rises = curves.sort(["class", "ttl_seconds"]).with_columns(
            pl.col("token_hit_rate").diff().over("class").alias("step"))
        return bool((rises.filter(pl.col("class") == "chatbot")["step"].drop_nulls() < -1e-12).any())
    if ex.id == "capacity-half":
        table = _table("conversation", size)
        unbounded = float(R.hit_rates(table, table.default_setting())["token_hit_rate"][-1])
        grid = R.capacity_grid(table, points=200)
        curve = R.capacity_curve(table, table.default_setting(), grid)
        reach = curve.filter(curve["token_hit_rate"] >= unbounded / 2)
        return float(reach["capacity_tokens"][0])
    if ex.id == "fp4-v3-bytes":
        from tiered_kv.arch import DEEPSEEK_V3, fp4_bits

        return float(DEEPSEEK_V3.bytes_per_token(fp4_bits("mxfp4")))
    if ex.id == "hit-speedup-128k":
        from tiered_kv.sim.cluster.latency import hit_ttft, miss_ttft, preset

        cfg = preset("deepseek-v3")
        return float(miss_ttft(cfg, 131072) / hit_ttft(cfg, 131072))
    if ex.id == "volatile-depth-half":
        from tiered_kv.viz.prompt_layout import keep_depth

        return float(keep_depth("agent, synthetic", 0.5, quick=size == "small"))
    if ex.id == "replay-exact-small":
        from tiered_kv.model import preset as model_preset

        cfg = model_preset("small")
        return float(max(cfg.enc_layers, cfg.dec_layers) * (cfg.window - 1) + 1)
    raise AssertionError(ex.id)  # every id above has a branch


@dataclass(frozen=True)
class CheckResult:
    exercise: str
    answer: object
    expected: float | bool
    correct: bool
    message: str

    def _repr_html_(self) -> str:
        color = "#2a7d2a" if self.correct else "#b03a2e"
        return f'<div class="tkv-check" style="color:{color}"><b>{html.escape(self.exercise)}</b>: {html.escape(self.message)}</div>'

    def __str__(self) -> str:
        return f"{self.exercise}: {self.message}"


def _parse(answer, unit: str):
    if unit == "yes/no":
        text = answer if isinstance(answer, bool) else str(answer).strip().lower()
        if text in (True, False, "yes", "y", "true", "no", "n", "false"):
            return text in (True, "yes", "y", "true")
        raise ValueError(f"answer: write yes or no, got {answer!r}")
    if isinstance(answer, str):
        from tiered_kv.units import parse_bytes

        text = answer.strip().lower().rstrip("x").replace(",", "").replace("%", "e-2")
        try:
            return float(text)
        except ValueError:
            return float(parse_bytes(answer, name="answer"))
    return float(answer)


def _fmt(value, unit: str) -> str:
    if unit == "yes/no":
        return "yes" if value else "no"
    if unit == "fraction":
        return f"{value:.3f} ({value:.1%})"
    return f"{value:.3g}x" if unit == "x" else f"{value:,.6g} {unit}"


def check_answer(exercise_id: str, answer, size: str | None = None) -> CheckResult:
    """Compare a prediction with the package's answer; ``None`` means not answered yet."""
    ex = exercise(exercise_id)
    want = expected(ex.id, size)
    if answer is None:
        return CheckResult(ex.id, None, want, False, f"not answered yet. {ex.question} Explore: {ex.explore}")
    got = _parse(answer, ex.unit)
    if ex.unit == "yes/no":
        ok = got == want
    elif ex.unit == "fraction":
        ok = abs(got - want) <= ex.tolerance
    elif ex.tolerance == 0:
        ok = math.isclose(got, want, rel_tol=0, abs_tol=1e-9)
    else:
        ok = math.isfinite(got) and abs(got - want) <= ex.tolerance * abs(want)
    tol = "" if ex.tolerance == 0 or ex.unit == "yes/no" else (
        f" (within ±{ex.tolerance:g})" if ex.unit == "fraction" else f" (within ±{ex.tolerance:.0%})")
    if ok:
        msg = f"correct: {_fmt(got, ex.unit)}; the model gives {_fmt(want, ex.unit)}{tol}. {ex.why}"
    else:
        msg = f"not quite: you said {_fmt(got, ex.unit)}, the model gives {_fmt(want, ex.unit)}{tol}. Explore: {ex.explore}"
    return CheckResult(ex.id, answer, want, ok, msg)
