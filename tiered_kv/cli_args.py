"""Flag values checked where they are read: every error names the flag typed and its range.

argparse calls a flag's ``type`` with the text the user typed; the functions here return such
types. A value out of range fails there, as ``tiered-kv simulate: error: argument --nodes:
must be an integer >= 1 (machines), got '0'`` with exit status 2, instead of surfacing later
under an internal name (``high_watermark``), being replaced by a default, or switching models
silently (``--nodes 0`` would mean the single-cache model). Two argparse habits are mended here
too (:func:`join_negative_values`, :class:`Parser`), and :func:`discover` finds the command
modules: this module sits below the commands and the benchmarks, so both use it without
importing each other or :mod:`tiered_kv.cli`.
"""

from __future__ import annotations

import argparse
import importlib
import math
import pkgutil
import re
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

#: A value that looks like a negative number, with or without a unit (-5, -5GiB, -.5, -1e3).
_NEGATIVE = re.compile(r"-(\d|\.\d)")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line and a pointer to ``--help`` (exit status 2)."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        sys.stderr.write(f"{self.prog}: error: {message}\n({self.prog} --help lists every flag and its range)\n")
        sys.exit(2)


def join_negative_values(argv: Sequence[str]) -> list[str]:
    """``["--capacity", "-5GiB"]`` -> ``["--capacity=-5GiB"]``: argparse takes a value that starts
    with ``-`` and is not a plain number for an option (``expected one argument``); glued to its
    flag, it reaches the flag's type, which names the range."""
    out: list[str] = []
    for tok in argv:
        flag = out[-1] if out else ""
        if _NEGATIVE.match(tok) and flag.startswith("--") and "=" not in flag and len(flag) > 2:
            out[-1] = f"{flag}={tok}"
        else:
            out.append(tok)
    return out


def _fail(what: str, text: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"must be {what}, got {text!r}")


def _checked(what: str, convert: Callable[[str], Any], ok: Callable[[Any], bool] = lambda _: True,
             ) -> Callable[[str], Any]:
    """The type every function below returns: ``convert(text)``, refused as ``must be <what>,
    got '<text>'`` when it raises ValueError or ``ok`` rejects its value."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise _fail(what, text) from None
        if not ok(value):
            raise _fail(what, text)
        return value

    return parse


def capacity() -> Callable[[str], str]:
    """A cache size: tokens (``2000000``) or bytes with a unit (``64GiB``), or ``unlimited``.

    Returns the text, stripped (the commands turn it into tokens with their bytes per token);
    it is checked by the library's own parser, so the flag and the commands cannot disagree.
    """
    def convert(text: str) -> str:
        from tiered_kv.sim.policies import capacity_tokens_from

        capacity_tokens_from(text)
        return text.strip()

    return _checked("a size >= 0: tokens (e.g. 2000000) or bytes with a unit (e.g. 64GiB, 1.5TB), or 'unlimited'",
                    convert)


def size_bytes(*, zero: bool = True) -> Callable[[str], str]:
    """A size in bytes (``890``, ``64MiB``, ``100PiB``); the text, unchanged."""

    def convert(text: str) -> str:
        from tiered_kv.units import parse_bytes

        if parse_bytes(text) == 0 and not zero:  # (it refuses a sign)
            raise ValueError(text)
        return text

    return _checked(f"a size in bytes {'>= 0' if zero else '> 0'} (e.g. 890, 64MiB, 2TiB)", convert)


def positive_float(what: str) -> Callable[[str], float]:
    """A finite number > 0 (``what`` names it: "KV bytes per token")."""
    return _checked(f"a number > 0 ({what})", float, lambda v: v > 0 and math.isfinite(v))


def int_at_least(low: int, what: str) -> Callable[[str], int]:
    """An integer >= ``low`` (``what`` names it: "machines")."""
    return _checked(f"an integer >= {low} ({what})", int, lambda v: v >= low)


def fraction(*, low_open: bool = True, high_open: bool = False) -> Callable[[str], float]:
    """A number in the interval written in the message: ``(0, 1]`` by default."""
    interval = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
    return _checked(f"a fraction in {interval}", float,
                    lambda v: (v > 0 if low_open else v >= 0) and (v < 1 if high_open else v <= 1))


def check_watermarks(high: float, low: float) -> None:
    """``--low`` must not exceed ``--high`` (each is checked on its own by :func:`fraction`)."""
    if low > high:
        raise ValueError(f"--low {low:g} is above --high {high:g}: give 0 < --low <= --high <= 1")


def check_ttl_classes(per_class: dict[str, float], classes: Sequence[str]) -> None:
    """Every ``--ttl CLASS=...`` must name a class of the trace; say how to give one if it does not.

    A trace whose name says nothing of its traffic (a generic JSONL, a Mooncake file renamed)
    gets the class ``default``; then ``--class NAME`` labels all of it.
    """
    unknown = sorted(set(per_class) - set(classes))
    if not unknown:
        return
    hint = (f"; to treat every request of this trace as {unknown[0]!r}, add --class {unknown[0]}"
            if len(unknown) == 1 else "; --class NAME labels every request of the trace with one class")
    raise ValueError(f"--ttl: classes {unknown} are not in the trace (its classes: {list(classes)})"
                     f"{hint}, or give --ttl DURATION for every class")


#: Length of a synthetic workload: the generator's range (tiered_kv.sim.workload.synth.generate).
MAX_SYNTH_DAYS = 3650.0


def synth_days() -> Callable[[str], float]:
    """Days of synthetic traffic: ``14`` (a bare number is days), ``14d``, ``36h``; in (0, 3650]."""

    def convert(text: str) -> float:
        from tiered_kv.units import DAY_S, parse_duration

        t = text.strip()
        return float(t) if re.fullmatch(r"[0-9_]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?", t) \
            else parse_duration(t) / DAY_S

    return _checked(f"a duration in (0, {MAX_SYNTH_DAYS:g}] days (e.g. 14, 14d, 36h)", convert,
                    lambda days: 0 < days <= MAX_SYNTH_DAYS)


def _registered(names: Callable[[], Sequence[str]]) -> Callable[[str], str]:
    """A name of a registry, read when the flag is given, not at start-up."""

    def parse(text: str) -> str:
        choices = names()
        if text not in choices:
            raise _fail(f"one of {', '.join(choices)}", text)
        return text

    return parse


def synth_preset() -> Callable[[str], str]:
    """A preset of the synthetic workload generator (its registry: ``PRESETS``)."""
    return _registered(lambda: importlib.import_module("tiered_kv.sim.workload.synth").PRESETS)


def policy_name() -> Callable[[str], str]:
    """A registered policy name."""
    return _registered(lambda: importlib.import_module("tiered_kv.sim.policies").policy_names())


def lazy_help(render: Callable[[], str]) -> type[argparse.Action]:
    """A store action whose help text is ``render()``, called only when help is printed.

    Why: a flag's help may list a registry (every policy) that costs imports a command's own
    run does not always need; argparse reads ``action.help`` only while formatting help.
    """

    class Store(argparse.Action):
        help = property(lambda self: render(), lambda self, _value: None)

        def __call__(self, parser, namespace, values, option_string=None):  # noqa: D102 - argparse's hook
            setattr(namespace, self.dest, values)

    return Store


def flag_names(parser: argparse.ArgumentParser, aliases: dict[str, str] | None = None) -> dict[str, str]:
    """Internal parameter name -> the flag a user types, for ``parser`` and its sub-parsers.

    A flag's ``dest`` (``bytes_per_token``) is its own parameter name; ``aliases`` adds those
    whose value reaches the library under another name (``preset`` from ``--synth``).
    """
    out: dict[str, str] = {}
    for action in parser._actions:
        longs = [s for s in action.option_strings if s.startswith("--")]
        if longs and action.dest not in out:
            out[action.dest] = longs[0]
        if isinstance(action, argparse._SubParsersAction):  # bench NAME: its benchmarks' flags
            for sub in action.choices.values():
                for k, v in flag_names(sub).items():
                    out.setdefault(k, v)
    out.update(aliases or {})
    return out


#: "days: must be ...", "SynthConfig.days: must be ..." or "ttl agent: must be ..." (a parameter
#: and one word that says which of its entries: a class, a policy, a file): the library's way to
#: name a parameter.
_PARAMETER = re.compile(r"^(?:[A-Z]\w*\.)?([a-z_]\w*)( [^\s:]+)?: ")
#: "high_watermark=0.9" in the rest of such a message: another parameter, quoted with its value
#: (a match inside '...', the user's own input echoed back, is left as typed).
_QUOTED = re.compile(r"'[^']*'|(?<![\w-])([a-z_]\w*)=")


def name_flags(message: str, flags: dict[str, str]) -> str:
    """``message`` with a leading internal parameter name replaced by the flag the user typed, and
    so every parameter it quotes with a value (``low_watermark: must be in [0, high_watermark=0.9]``
    -> ``--low: must be in [0, --high=0.9]``; ``ttl agent: ...`` -> ``--ttl agent: ...``).

    Only a message that starts with a flag's parameter is rewritten: elsewhere ``name=`` may be a
    setting of something else (a trace row's ``block_size=``), and so it may after an entry's word
    (``policy NAME: ... give key=VALUE`` names the policy's own parameter), whose rest is kept.
    Text in single quotes is what the user typed, echoed back, and stays as it is (``--part: ...,
    got 'ttl=3'``).
    """
    m = _PARAMETER.match(message)
    if m is None or m.group(1) not in flags:
        return message

    def flag(q: re.Match) -> str:
        return q.group(0) if q.group(1) is None else f"{flags.get(q.group(1), q.group(1))}="

    entry, rest = m.group(2) or "", message[m.end():]
    return f"{flags[m.group(1)]}{entry}: {rest if entry else _QUOTED.sub(flag, rest)}"


def discover(package: ModuleType, only: str | None = None, attrs: tuple[str, ...] = ("NAME", "register", "run"),
             ) -> list[ModuleType]:
    """Modules of ``package`` that define every name of ``attrs`` (a command: ``NAME``,
    ``register`` and ``run``; a figure: ``NAME`` and ``build``), sorted by ``NAME``.

    With ``only``, just the module of that file name when it is such a module and its ``NAME``
    is ``only`` (nothing else is imported); otherwise every such module.
    """
    def fits(module: ModuleType) -> bool:
        return all(hasattr(module, attr) for attr in attrs)

    names = [info.name for info in pkgutil.iter_modules(package.__path__) if not info.name.startswith("_")]
    if only in names:
        module = importlib.import_module(f"{package.__name__}.{only}")
        if fits(module) and module.NAME == only:
            return [module]
    found = [m for m in (importlib.import_module(f"{package.__name__}.{n}") for n in names) if fits(m)]
    return sorted(found, key=lambda m: m.NAME)
