"""A plug-in policy with parameters from the command line: ``--policy path/to/file.py:Class:key=value``.

The parameters are annotated class attributes of the plug-in (docs/policies.md); the CLI's
numbers must equal the policy's own run with the same parameters, under either admission
filter and in worker processes, and every bad parameter is a one-line error naming the key.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap

import pytest

from tiered_kv.cli import main
from tiered_kv.sim.policies import make_policy, plugin_parameters
from tiered_kv.sim.trace_replay import compile_trace, replay
from tiered_kv.sim.traces import load_trace, shipped_trace

PLUGIN = '''
{future}
from tiered_kv.sim.policies import PluginPolicy
from tiered_kv.sim.policies.registry import check_range


class KthRecent(PluginPolicy):
    """Evict the (skip + 1)-th most recently used block (skip = 0 is MRU)."""

    name = "kth-recent-{tag}"
    skip: int = 0
    scale: float = 1.0
    verbose: bool = False
    label: str = "k"

    def check(self):
        check_range("kth-recent skip", self.skip, 0, 1000, integer=True)

    def reset(self, capacity_blocks):
        self.order = {{}}

    def lookup(self, block):
        return block in self.order

    def touch(self, block):
        del self.order[block]
        self.order[block] = None

    def insert(self, block):
        self.order[block] = None

    def evict(self):
        keys = list(self.order)
        block = keys[max(len(keys) - 1 - self.skip, 0)]
        del self.order[block]
        return block


class Needs(KthRecent):
    name = "needs-window-{tag}"
    window: int
'''

FROZEN = '''
from dataclasses import dataclass
from typing import ClassVar

from tiered_kv.sim.policies import PluginPolicy


@dataclass(frozen=True)
class Frozen(PluginPolicy):
    name: ClassVar[str] = "frozen-example"
    skip: int = 0

    def reset(self, capacity_blocks):
        self.order = {}

    def lookup(self, block):
        return block in self.order

    def touch(self, block):
        pass

    def insert(self, block):
        self.order[block] = None

    def evict(self):
        return self.order.popitem()[0]
'''


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A short Mooncake trace file (its first 600 requests) and the plug-in files."""
    root = tmp_path_factory.mktemp("plugin_cli")
    lines = shipped_trace("conversation").read_text().splitlines()[:600]
    trace = root / "short.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    plugin = root / "kth.py"
    plugin.write_text(PLUGIN.format(future="", tag="a"))
    future = root / "kth_future.py"  # the same with string annotations
    future.write_text(PLUGIN.format(future="from __future__ import annotations", tag="b"))
    frozen = root / "frozen.py"
    frozen.write_text(FROZEN)
    return {"trace": trace, "plugin": plugin, "future": future, "frozen": frozen}


@pytest.fixture(scope="module")
def compiled(files):
    return compile_trace(load_trace(files["trace"]))


def _curves(capsys, files, *specs, admission="all", workers=1):
    argv = ["curves", "--trace", str(files["trace"]), "--points", "4", "--belady-points", "0", "--ttl-points", "2",
            "--admission", admission, "--workers", str(workers), "--policy", *specs, "--json"]
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_parameters_from_the_cli_equal_the_policys_own_run(capsys, files, compiled):
    base = f"{files['plugin']}:KthRecent"
    out = _curves(capsys, files, f"{base}:skip=2,scale=0.5,verbose=true,label=x", base)
    with_skip, plain = out["policies"].values()
    assert with_skip["method"] == plain["method"] == "replay"
    for j, cap in enumerate(out["capacity_tokens"]):
        pol = make_policy(f"{base}:skip=2,scale=0.5,verbose=true,label=x", capacity_tokens=cap)
        assert (pol.skip, pol.scale, pol.verbose, pol.label) == (2, 0.5, True, "x")
        res = replay(compiled, pol)
        assert with_skip["hit_tokens"][j] == res.hit_tokens
        assert with_skip["ssd_bytes_written"][j] == pytest.approx(res.extra["ssd_bytes_written"])
        assert plain["hit_tokens"][j] == replay(compiled, make_policy(base, capacity_tokens=cap)).hit_tokens
    assert with_skip["hit_tokens"] != plain["hit_tokens"]  # the parameter reached the replays
    assert all(w > 0 for w in with_skip["ssd_bytes_written"])


def test_parameters_survive_the_admission_filter_and_worker_processes(capsys, files, compiled):
    spec = f"{files['plugin']}:KthRecent:skip=3"
    out = _curves(capsys, files, spec, admission="second-sighting", workers=2)
    got = out["policies"][spec]
    assert got["admission"] == "second-sighting"
    for j, cap in enumerate(out["capacity_tokens"]):
        res = replay(compiled, make_policy(spec, capacity_tokens=cap, admission="second-sighting"))
        assert got["hit_tokens"][j] == res.hit_tokens
        assert got["ssd_bytes_written"][j] == pytest.approx(res.extra["ssd_bytes_written"])


def test_replace_keeps_the_parameters(files):
    pol = make_policy(f"{files['plugin']}:KthRecent:skip=4", capacity_tokens=1024)
    again = dataclasses.replace(pol, admission="second-sighting")
    assert again.skip == 4 and again.plugin_params == pol.plugin_params and again.admission.name != "all"


def test_declared_parameters_and_their_types(files):
    from tiered_kv.sim.policies import load_policy_file
    from tiered_kv.sim.policies.registry import _REGISTRY

    for key in ("plugin", "future"):  # string annotations (from __future__) resolve the same
        cls = _REGISTRY[load_policy_file(f"{files[key]}:KthRecent")]
        params = plugin_parameters(cls)
        assert params == {"skip": (int, 0), "scale": (float, 1.0), "verbose": (bool, False), "label": (str, "k")}
        with pytest.raises(ValueError, match="parameter skip: must be an integer, got 'many'"):
            make_policy(f"{files[key]}:KthRecent:skip=many")
    assert make_policy(f"{files['plugin']}:KthRecent:scale=2").scale == 2.0  # an int is a number


@pytest.mark.parametrize("params, match", [
    ("skp=1", r"unknown parameter\(s\) \['skp'\]; it takes \[.*'label', 'scale', 'skip', 'verbose'\]"),
    ("skip=abc", r"kth-recent-a parameter skip: must be an integer, got 'abc'"),
    ("skip=1.5", r"parameter skip: must be an integer, got 1.5"),
    ("scale=big", r"parameter scale: must be a number, got 'big'"),
    ("verbose=maybe", r"parameter verbose: must be true or false, got 'maybe'"),
    ("skip=-1", r"kth-recent skip: must be an integer in \[0, 1000\], got -1"),
    ("skip", r"parameters are key=value, comma-separated \(got 'skip'\)"),
    ("=3", r"parameters are key=value"),
])
def test_bad_parameters_are_one_line_errors_naming_the_key(capsys, files, params, match):
    code = main(["curves", "--trace", str(files["trace"]), "--points", "2", "--belady-points", "0",
                 "--workers", "2", "--policy", f"{files['plugin']}:KthRecent:{params}"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    import re

    assert re.search(match, err), err


def test_a_required_parameter_and_a_frozen_plugin_are_named(capsys, files):
    argv = ["curves", "--trace", str(files["trace"]), "--points", "2", "--belady-points", "0", "--workers", "1"]
    assert main([*argv, "--policy", f"{files['plugin']}:Needs"]) == 2
    assert "parameter window is required (give window=VALUE)" in capsys.readouterr().err
    assert main([*argv, "--policy", f"{files['plugin']}:Needs:window=3"]) == 0
    capsys.readouterr()
    assert main([*argv, "--policy", f"{files['frozen']}:Frozen:skip=1"]) == 2
    err = capsys.readouterr().err
    assert "frozen-example: cannot keep state in a frozen dataclass" in err and "Traceback" not in err


def test_docs_mention_plugin_parameters():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "policies.md").read_text()
    assert "file.py:ClassName:key=value" in textwrap.dedent(text).replace("path/to/", "")
