"""One vLLM engine with the tiered-kv connector, driven by JSON lines (runs in the engine venv).

:mod:`.client` starts it from the main venv and talks to it over stdin/stdout. vLLM logs to
stdout too, so every reply is one line that starts with :data:`REPLY` and the client skips the rest.

Commands (one JSON object a line, ``{"cmd": ...}``): ``start`` (build the engine: model
directory, store, format, block size, batch budget, prefix caching, capture file), ``generate``
(token-id prompts, greedy; per prompt: output tokens, cached tokens, what the connector measured,
wall time, and optionally the first token's log-probabilities), ``build_model`` (write a
:class:`~tiered_kv.connectors.tiny_model.TinyLlama`), ``stop``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

REPLY = "@@tiered-kv@@ "


def _engine(spec: dict[str, Any]):
    from vllm import LLM
    from vllm.config import KVTransferConfig

    extra = {"store": spec["store"], "fmt": spec.get("fmt", "bf16")}
    for key in ("traffic_class", "ttl", "capacity_bytes", "traffic_classes", "capture", "gc_each_request"):
        if spec.get(key) is not None:
            extra[key] = spec[key]
    kv = None
    if spec.get("store"):
        kv = KVTransferConfig(kv_connector="TieredKVConnector", kv_role="kv_both",
                              kv_connector_module_path="tiered_kv.connectors.vllm",
                              kv_connector_extra_config=extra, kv_load_failure_policy="recompute")
    return LLM(model=spec["model"], skip_tokenizer_init=True, dtype="bfloat16", seed=0,
               block_size=spec.get("block_size", 32), max_model_len=spec.get("max_model_len", 16384),
               max_num_batched_tokens=spec.get("max_num_batched_tokens", 16384),
               max_num_seqs=spec.get("max_num_seqs", 8), enable_prefix_caching=spec.get("prefix_caching", True),
               max_logprobs=spec.get("max_logprobs", 20), kv_transfer_config=kv,
               enforce_eager=spec.get("eager", True))  # eager: no torch.compile warm-up (start in seconds)


def _generate(llm, cmd: dict[str, Any]) -> list[dict[str, Any]]:
    from vllm import SamplingParams

    extra = {"kv_transfer_params": {"traffic_class": cmd["traffic_class"]}} if cmd.get("traffic_class") else None
    params = SamplingParams(max_tokens=cmd.get("max_tokens", 1), temperature=0.0, logprobs=cmd.get("logprobs"),
                            extra_args=extra, ignore_eos=True)
    prompts = [{"prompt_token_ids": list(map(int, p))} for p in cmd["prompts"]]
    out = []  # one_by_one (sequential): each request sees what the previous one stored
    for batch in [[p] for p in prompts] if cmd.get("one_by_one", True) else [prompts]:
        t0 = time.perf_counter()
        results = llm.generate(batch, params, use_tqdm=False)
        out += [_result(r, time.perf_counter() - t0) for r in results]
    return out


def _result(res, seconds: float) -> dict[str, Any]:
    comp = res.outputs[0]
    first = None
    if comp.logprobs:
        first = {str(t): float(lp.logprob) for t, lp in comp.logprobs[0].items()}
    connector = (res.kv_transfer_params or {}).get("tiered_kv") if hasattr(res, "kv_transfer_params") else None
    return {"tokens": list(comp.token_ids), "cached_tokens": int(res.num_cached_tokens or 0),
            "connector": connector, "seconds": seconds, "first_logprobs": first}


def serve(stdin=sys.stdin, stdout=sys.stdout) -> int:
    """Answer commands until ``stop`` or end of input; an exception is a reply, not a crash."""
    llm = None
    for line in stdin:
        if not line.strip():
            continue
        try:
            cmd = json.loads(line)
            if cmd["cmd"] == "start":
                t0 = time.perf_counter()
                llm = _engine(cmd)
                reply = {"ok": True, "seconds": time.perf_counter() - t0}
            elif cmd["cmd"] == "generate":
                reply = {"ok": True, "results": _generate(llm, cmd)}
            elif cmd["cmd"] == "build_model":
                from tiered_kv.connectors.tiny_model import TinyLlama, build_tiny_llama

                reply = {"ok": True, "path": str(build_tiny_llama(cmd["path"], TinyLlama(**cmd.get("shape", {}))))}
            elif cmd["cmd"] == "stop":
                stdout.write(REPLY + json.dumps({"ok": True}) + "\n")
                stdout.flush()
                return 0
            else:
                reply = {"ok": False, "error": f"unknown command {cmd['cmd']!r}"}
        except Exception as exc:  # noqa: BLE001 - sent back to the client, which raises it there
            text = " ".join(str(exc).split())[:800] or type(exc).__name__
            reply = {"ok": False, "error": f"{type(exc).__name__}: {text}"}
        stdout.write(REPLY + json.dumps(reply) + "\n")
        stdout.flush()
    return 0


if __name__ == "__main__":  # vLLM may spawn processes: the guard keeps them from re-running this
    sys.exit(serve())
