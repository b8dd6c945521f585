"""User policies as small Python classes, and loading them from a file (docs/policies.md).

A plug-in subclasses :class:`PluginPolicy`, sets ``name`` and implements five methods over
block ids (dense ints); the driver here calls them once per block access, in trace order:

- ``reset(capacity_blocks)``: start empty (called once per run);
- ``lookup(block) -> bool``: is the block cached? (must not change anything);
- ``touch(block)``: a cached block was accessed (a hit);
- ``insert(block)``: cache a missed block (the driver has made room first);
- ``evict() -> block``: remove one cached block of your choice and return it.

The driver makes room (calling ``evict`` while a miss would overflow), applies the admission
filter, and derives prefix hits and SSD wear exactly as for the built-in zoo (:mod:`.blockwise`).
During each call ``self.now`` (the trace's clock, seconds), ``self.traffic_class`` and
``self.tokens`` describe the access, so policies stay pure: no wall clock, only the event.

Parameters are annotated class attributes with defaults (``skip: int = 0``, docs/policies.md);
their values travel in the ``plugin_params`` field, so ``dataclasses.replace`` keeps them. A
plug-in keeps its state in plain attributes, so it must not be a frozen dataclass.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tiered_kv.sim.policies.blockwise import BlockPolicy
from tiered_kv.sim.policies.registry import _REGISTRY, get_policy, policy_names, register_policy
from tiered_kv.units import DEFAULT_BYTES_PER_TOKEN

METHODS = ("reset", "lookup", "touch", "insert", "evict")


_REQUIRED = object()
_BASE_FIELDS = ("capacity_tokens", "admission", "bytes_per_token", "plugin_params")
_SIMPLE = {"int": int, "float": float, "bool": bool, "str": str}


def plugin_parameters(cls: type) -> dict[str, tuple[Any, Any]]:
    r"""A plug-in class's parameters: ``{name: (annotated type or None, default)}``.

    Annotated class attributes of the plug-in and its bases below :class:`PluginPolicy`, except
    ``ClassVar``\ s, ``name`` and names starting with ``_``; a parameter without a default is
    required.
    """
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: read them as written
        hints = {}
    out: dict[str, tuple[Any, Any]] = {}
    for klass in reversed(cls.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, PluginPolicy)) or klass is PluginPolicy:
            continue
        for key, raw in vars(klass).get("__annotations__", {}).items():
            hint = hints.get(key, raw)
            text = hint if isinstance(hint, str) else ""
            if key == "name" or key.startswith("_") or key in _BASE_FIELDS or typing.get_origin(hint) is ClassVar \
                    or hint is ClassVar or text.startswith(("ClassVar", "typing.ClassVar")):
                continue
            typ = _SIMPLE.get(hint, hint) if isinstance(hint, str) else hint
            default = getattr(cls, key, _REQUIRED)  # a subclass may override the value unannotated
            if isinstance(default, dataclasses.Field):
                default = default.default if default.default is not dataclasses.MISSING else _REQUIRED
            out[key] = (typ if typ in (int, float, bool, str) else None, default)
    return out


#: What a parameter annotated ``bool``, ``int`` or ``float`` accepts (ints are accepted as floats).
_KINDS = {bool: ("true or false", (bool,)), int: ("an integer", (int, np.integer)),
          float: ("a number", (int, float, np.number))}


def _coerce(policy: str, key: str, typ, value):
    """``value`` checked against a parameter's annotated type."""
    if typ is None:
        return value
    if typ is str:
        return value if isinstance(value, str) else str(value)
    what, kinds = _KINDS[typ]
    if not isinstance(value, kinds) or (typ is not bool and isinstance(value, bool)):
        raise ValueError(f"policy {policy} parameter {key}: must be {what}, got {value!r}")
    return typ(value)


@dataclass(frozen=True, init=False)
class PluginPolicy(BlockPolicy):
    """Base class of Python plug-in policies (see the module docstring)."""

    name: ClassVar[str] = "plugin"
    plugin_params: dict = field(default_factory=dict, hash=False, repr=False)

    def __init__(self, capacity_tokens: int | None = None, admission: Any = None,
                 bytes_per_token: float = DEFAULT_BYTES_PER_TOKEN, plugin_params: dict | None = None,
                 **params: Any) -> None:
        declared = plugin_parameters(type(self))
        given = {**(plugin_params or {}), **params}
        unknown = sorted(set(given) - set(declared))
        if unknown:
            raise ValueError(f"policy {self.name}: unknown parameter(s) {unknown}; it takes "
                             f"{sorted(declared) or 'none'} (and {', '.join(_BASE_FIELDS[:3])})")
        values = {}
        for key, (typ, default) in declared.items():
            if key not in given and default is _REQUIRED:
                raise ValueError(f"policy {self.name}: parameter {key} is required (give {key}=VALUE)")
            values[key] = _coerce(self.name, key, typ, given[key]) if key in given else default
        for key, value in (("capacity_tokens", capacity_tokens), ("admission", admission),
                           ("bytes_per_token", bytes_per_token), ("plugin_params", values), *values.items()):
            object.__setattr__(self, key, value)
        self.__post_init__()
        self.check()

    def check(self) -> None:
        """Validate the parameters (``self.<name>``); raise ValueError naming the parameter and its range."""

    def kernel_run(self, trace, capacity_blocks, admit):
        try:
            return self._drive(trace, capacity_blocks, admit)
        except dataclasses.FrozenInstanceError as exc:
            raise ValueError(f"policy {self.name}: cannot keep state in a frozen dataclass ({exc}); declare "
                            "parameters as annotated class attributes (skip: int = 0) without @dataclass, "
                            "and keep state in plain attributes (self.order = {})") from exc

    def _drive(self, trace, capacity_blocks, admit):
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
    missing = [m for m in METHODS if not callable(getattr(cls, m, None))]
    if missing:
        raise ValueError(f"{path}: {cls_name} lacks method(s) {', '.join(missing)} "
                         f"(a plug-in implements {', '.join(METHODS)})")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name or name == PluginPolicy.name:
        raise ValueError(f"{path}: {cls_name} needs its own class attribute 'name'")
    if _REGISTRY.get(name) is not cls:
        register_policy(cls)
    return name


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


def policy_class(name: str) -> tuple[type, set[str]]:
    """A registered policy's class and the settings it takes; an unknown name is an error listing them."""
    if name not in policy_names():
        get_policy(name)  # raises, listing the registered names
    cls = _REGISTRY[name]
    known = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    if isinstance(cls, type) and issubclass(cls, PluginPolicy):
        known = (known | set(plugin_parameters(cls))) - {"plugin_params"}
    return cls, known


def make_policy(spec: str, **fixed):
    """The policy object of a spec (name, plug-in file, parameters) plus ``fixed`` settings.

    Settings a policy does not take (``admission`` for ``lru``, say) are an error naming them.
    """
    name, params = parse_policy_spec(spec)
    cls, known = policy_class(name)
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"policy {name}: unknown parameter(s) {unknown}; it takes {sorted(known)}")
    bad = sorted(k for k, v in fixed.items() if k not in known and v is not None)
    if bad:
        raise ValueError(f"policy {name}: does not take {bad} (it takes {sorted(known)})")
    return cls(**{**{k: v for k, v in fixed.items() if k in known}, **params})  # the spec's own values win
