"""User policies as small Python classes, and loading them from a file (docs/policies.md).

A plug-in subclasses :class:`PluginPolicy`, sets ``name`` and implements four methods over
block ids (dense ints); the driver here calls them once per block access, in trace order:

- ``reset(capacity_blocks)``: start empty (called once per run);
- ``lookup(block) -> bool``: is the block cached? (must not change anything);
- ``touch(block)``: a cached block was accessed (a hit);
- ``insert(block)``: cache a missed block (the driver has made room first);
- ``evict() -> block``: remove one cached block of your choice and return it.

The driver counts the cached blocks, calls ``evict`` while a miss would overflow the capacity,
applies the admission filter, checks that ``evict`` returned a cached block, and derives prefix
hits and SSD wear exactly as for the built-in zoo (:mod:`.blockwise`). During each call
``self.now`` (the trace's clock, seconds), ``self.traffic_class`` and ``self.tokens`` describe
the access, so policies stay pure: no wall clock, only the event. A Python plug-in replays
about a million accesses a second; the zoo's numba kernels are the fast form.

``load_policy_file("path/to/file.py:ClassName")`` imports the file, checks the class and its
methods (errors name the file and what is missing) and registers it, which is what
``tiered-kv curves --policy path/to/file.py:ClassName`` does.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from tiered_kv.sim.policies.blockwise import BlockPolicy
from tiered_kv.sim.policies.registry import _REGISTRY, register_policy

METHODS = ("reset", "lookup", "touch", "insert", "evict")


@dataclass(frozen=True)
class PluginPolicy(BlockPolicy):
    """Base class of Python plug-in policies (see the module docstring)."""

    name: ClassVar[str] = "plugin"

    def reset(self, capacity_blocks: int) -> None:
        raise NotImplementedError

    def lookup(self, block: int) -> bool:
        raise NotImplementedError

    def touch(self, block: int) -> None:
        raise NotImplementedError

    def insert(self, block: int) -> None:
        raise NotImplementedError

    def evict(self) -> int:
        raise NotImplementedError

    def kernel_run(self, trace, capacity_blocks, admit):
        m = trace.n_accesses
        hit = np.zeros(m, dtype=bool)
        ins = np.zeros(m, dtype=bool)
        classes = [trace.class_names[c] for c in trace.class_codes]
        req = trace.access_request
        times, tokens, blocks = trace.timestamps, trace.tokens.tolist(), trace.blocks.tolist()
        admit_l = admit.tolist()
        self.reset(int(capacity_blocks))
        used, peak = 0, 0
        for i in range(m):
            b = blocks[i]
            r = int(req[i])
            object.__setattr__(self, "now", float(times[r]))
            object.__setattr__(self, "traffic_class", classes[r])
            object.__setattr__(self, "tokens", tokens[i])
            if self.lookup(b):
                hit[i] = True
                self.touch(b)
                continue
            if not admit_l[i] or capacity_blocks < 1:
                continue
            while used + 1 > capacity_blocks:
                v = self.evict()
                if v is None or self.lookup(v):
                    raise ValueError(f"policy {self.name}: evict() must remove a cached block and return it, "
                                     f"got {v!r} (still cached or None)")
                used -= 1
            self.insert(b)
            used += 1
            peak = max(peak, used)
            ins[i] = True
        return hit, ins, peak


def _missing_methods(cls: type) -> list[str]:
    return [m for m in METHODS if getattr(cls, m, None) is getattr(PluginPolicy, m, None)
            or not callable(getattr(cls, m, None))]


def load_policy_file(spec: str) -> str:
    """Import ``path.py:ClassName``, check it, register it; returns its registered name."""
    path_text, sep, cls_name = spec.rpartition(":")
    if not sep or not path_text.endswith(".py") or not cls_name:
        raise ValueError(f"--policy {spec!r}: a plug-in is given as path/to/file.py:ClassName")
    path = Path(path_text)
    if not path.is_file():
        raise ValueError(f"{path}: no such policy file (from --policy {spec!r})")
    mod_name = f"tiered_kv_plugin_{abs(hash(str(path.resolve())))}"
    module_spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[mod_name] = module
    module_spec.loader.exec_module(module)
    cls = getattr(module, cls_name, None)
    if not isinstance(cls, type):
        found = sorted(k for k, v in vars(module).items() if isinstance(v, type) and issubclass(v, PluginPolicy)
                       and v is not PluginPolicy)
        raise ValueError(f"{path}: defines no class {cls_name!r} (policy classes there: {found or 'none'})")
    if not issubclass(cls, PluginPolicy):
        raise ValueError(f"{path}: {cls_name} must subclass tiered_kv.sim.policies.PluginPolicy")
    missing = _missing_methods(cls)
    if missing:
        raise ValueError(f"{path}: {cls_name} lacks method(s) {', '.join(missing)} "
                         f"(a plug-in implements {', '.join(METHODS)})")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name or name == PluginPolicy.name:
        raise ValueError(f"{path}: {cls_name} needs its own class attribute 'name'")
    if _REGISTRY.get(name) is not cls:
        register_policy(cls)
    return name


def resolve_policy_name(spec: str) -> str:
    """A registered name, or a plug-in file spec loaded and registered (its name returned)."""
    if ".py:" in spec:
        return load_policy_file(spec)
    return spec


def _value(text: str):
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def parse_policy_spec(spec: str) -> tuple[str, dict]:
    """``"lfu:aging_accesses=100000"`` -> ("lfu", {...}); ``"file.py:Class"`` loads the plug-in.

    Parameters of a plug-in file come after a second colon: ``file.py:Class:key=value``.
    """
    if ".py:" in spec:
        head, _, rest = spec.partition(".py:")
        cls, _, params = rest.partition(":")
        name, text = load_policy_file(f"{head}.py:{cls}"), params
    else:
        name, _, text = spec.partition(":")
    params = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, eq, val = item.partition("=")
        if not eq or not key:
            raise ValueError(f"--policy {spec!r}: parameters are key=value, comma-separated (got {item!r})")
        params[key.strip()] = _value(val)
    return name, params


def make_policy(spec: str, **fixed):
    """The policy object of a spec (name, plug-in file, parameters) plus ``fixed`` settings.

    Settings a policy does not take (``admission`` for ``lru``, say) are an error naming them.
    """
    from dataclasses import fields, is_dataclass

    from tiered_kv.sim.policies.registry import get_policy, policy_names

    name, params = parse_policy_spec(spec)
    if name not in policy_names():
        get_policy(name)  # raises, listing the registered names
    cls = _REGISTRY[name]
    known = {f.name for f in fields(cls)} if is_dataclass(cls) else set()
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"policy {name}: unknown parameter(s) {unknown}; it takes {sorted(known)}")
    bad = sorted(k for k, v in fixed.items() if k not in known and v is not None)
    if bad:
        raise ValueError(f"policy {name}: does not take {bad} (it takes {sorted(known)})")
    return cls(**{k: v for k, v in fixed.items() if k in known}, **params)
