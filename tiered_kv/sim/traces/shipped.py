"""The traces shipped in ``data/traces`` and the traffic class a file name implies."""

from __future__ import annotations

from pathlib import Path

from tiered_kv import DATA_DIR

#: Shipped traces by name: (path under ``data/traces``, traffic class).
SHIPPED = {
    "conversation": ("mooncake/conversation_trace.jsonl", "chatbot"),
    "synthetic": ("mooncake/synthetic_trace.jsonl", "synthetic"),
}


def shipped_trace(name: str = "conversation") -> Path:
    """Path of a trace shipped in ``data/traces`` (``conversation`` or ``synthetic``)."""
    if name not in SHIPPED:
        raise ValueError(f"shipped trace: must be one of {sorted(SHIPPED)}, got {name!r}")
    path = DATA_DIR / "traces" / SHIPPED[name][0]
    if not path.exists():
        raise FileNotFoundError(f"shipped trace {name!r} missing at {path} (see data/traces/README.md)")
    return path


def default_class_for(path: Path) -> str:
    """Traffic class implied by a shipped file name (conversation = chatbot), else ``default``."""
    stem = path.name.lower()
    if "conversation" in stem:
        return "chatbot"
    if "agent" in stem or "tool" in stem:
        return "agent"
    if "synthetic" in stem:
        return "synthetic"
    return "default"


def resolve_trace_path(text: str | Path) -> Path:
    """A shipped trace's path for its name (``conversation``), else ``text`` as a path."""
    path = Path(text)
    return shipped_trace(str(text)) if str(text) in SHIPPED and not path.exists() else path
