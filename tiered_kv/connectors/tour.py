"""The engine tour behind notebook 08: a real vLLM engine on the SSD tier, one call per step.

The notebook holds no logic, so each step it shows is one method of :class:`EngineTour`. The
prompts are a long shared "document" with questions after it, so the table shows a miss,
partial-prefix hits, vLLM's own prefix cache, and after a restart into a fresh engine process
that shares only the store, hits served from the tier alone.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import polars as pl

from tiered_kv.connectors.client import EngineProcess, build_model
from tiered_kv.viz import is_quick


def tour_prompts(document_tokens: int) -> dict[str, list[int]]:
    """A shared document and questions on it, plus an unrelated prompt (token ids, seeded)."""
    rng = random.Random(8)
    draw = lambda n: [rng.randrange(1, 1000) for _ in range(n)]  # noqa: E731
    doc = draw(document_tokens)
    return {"document": doc, "document + question 1": doc + draw(40), "document + question 2": doc + draw(56),
            "unrelated": draw(document_tokens // 2)}


class EngineTour:
    """One store, one engine process at a time (see the module docstring), all in ``workdir``
    (default: a new temporary folder) with the model and the engines' logs."""

    def __init__(self, workdir: str | Path | None = None, *, fmt: str = "bf16", document_tokens: int | None = None,
                 block_size: int = 32) -> None:
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="tiered-kv-tour-"))
        self.store = self.workdir / "store"
        self.fmt = fmt
        self.block_size = block_size
        self.prompts = tour_prompts(document_tokens or (600 if is_quick() else 4000))
        self.engine: EngineProcess | None = None
        self.engines_started = 0
        self.rows: list[dict[str, Any]] = []
        self.model = str(build_model(self.workdir / "model"))

    def start(self) -> float:
        """Start a fresh engine process (stopping the current one); return its start-up seconds."""
        self.stop()
        self.engines_started += 1
        self.engine = EngineProcess(log=self.workdir / f"engine{self.engines_started}.log")
        seconds = self.engine.start(model=self.model, store=str(self.store), fmt=self.fmt, block_size=self.block_size)
        self.engine.generate([[1] * (self.block_size // 2)])  # first-call costs out of the table; no full block
        return seconds

    def send(self, *names: str) -> pl.DataFrame:
        """Send the named prompts one at a time; one row each (also appended to :meth:`history`)."""
        if self.engine is None:
            raise RuntimeError("EngineTour.send: start an engine first (tour.start())")
        unknown = [n for n in names if n not in self.prompts]
        if unknown:
            raise ValueError(f"EngineTour.send: unknown prompt(s) {unknown}; choose from {list(self.prompts)}")
        results = self.engine.generate([self.prompts[n] for n in names])
        rows = [{"engine": self.engines_started, "prompt": n, "prompt_tokens": len(self.prompts[n]),
                 "vllm_cached_tokens": r["cached_tokens"], "tier_hit_tokens": r["connector"]["hit_tokens"],
                 "loaded_from_tier": r["connector"]["loaded_tokens"], "ttft_ms": round(1000 * r["seconds"], 1)}
                for n, r in zip(names, results, strict=True)]
        self.rows.extend(rows)
        return pl.DataFrame(rows)

    def history(self) -> pl.DataFrame:
        return pl.DataFrame(self.rows)

    def store_stats(self) -> dict[str, Any]:
        """``tiered-kv store stats`` of the store the engines write (chunks, bytes, classes, namespaces)."""
        cli = Path(sys.executable).parent / "tiered-kv"
        done = subprocess.run([str(cli), "store", "stats", str(self.store), "--json"], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"tiered-kv store stats failed: {done.stderr.strip()}")
        stats = json.loads(done.stdout)
        return {k: stats[k] for k in ("chunks", "bytes") if k in stats}

    def stop(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None

    def close(self, *, remove: bool = True) -> None:
        """Stop the engine and delete the work folder (model and store)."""
        self.stop()
        if remove:
            shutil.rmtree(self.workdir, ignore_errors=True)
