"""Bad flag values: each error names the flag the user typed and its allowed range, in one line,
with exit status 2 (tiered_kv/cli_args.py); and what `curves` exposes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tiered_kv.cli import main
from tiered_kv.cli_args import join_negative_values

SIM = ["simulate", "--trace", "conversation"]


@pytest.mark.parametrize("argv,flag,range_", [
    # argparse took -5GiB for an option: "expected one argument" and the whole usage
    (SIM + ["--capacity", "-5GiB"], "--capacity", "size >= 0"),
    (SIM + ["--capacity", "-5"], "--capacity", "size >= 0"),  # was "cannot parse '-5'"
    (SIM + ["--capacity", "12 parsecs"], "--capacity", "bytes with a unit"),
    (SIM + ["--bytes-per-token", "0", "--capacity", "1GiB"], "--bytes-per-token", "> 0"),  # was read as 70,272
    (SIM + ["--bytes-per-token", "-5", "--capacity", "1GiB"], "--bytes-per-token", "> 0"),  # was "-214748365"
    (SIM + ["--nodes", "0"], "--nodes", ">= 1"),  # ran the single-cache model silently
    (SIM + ["--nodes", "-2"], "--nodes", ">= 1"),
    (SIM + ["--policy", "watermark", "--capacity", "1GiB", "--high", "1.5"], "--high", "(0, 1]"),  # high_watermark
    (SIM + ["--policy", "watermark", "--capacity", "1GiB", "--low", "0"], "--low", "(0, 1]"),
    (SIM + ["--warmup", "1"], "--warmup", "[0, 1)"),
    (SIM + ["--nodes", "2", "--shared-capacity", "-1TiB"], "--shared-capacity", "size >= 0"),
    (SIM + ["--nodes", "2", "--host-capacity", "-3GiB"], "--host-capacity", "bytes >= 0"),
    (["retention", "--trace", "conversation", "--capacity", "-5GiB"], "--capacity", "bytes > 0"),
    (["retention", "--trace", "conversation", "--capacity", "0"], "--capacity", "bytes > 0"),
    (["retention", "--trace", "conversation", "--bytes-per-token", "0"], "--bytes-per-token", "> 0"),
    (["curves", "--trace", "conversation", "--points", "1"], "--points", ">= 2"),
    (["curves", "--trace", "conversation", "--capacity", "-5GiB"], "--capacity", "size >= 0"),
])
def test_a_bad_value_names_its_flag_and_range(argv, flag, range_, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert flag in lines[0] and range_ in lines[0], err
    assert "usage:" not in err and "expected one argument" not in err
    assert "high_watermark" not in err and "low_watermark" not in err and "capacity_tokens" not in err
    assert len(lines) <= 2, err


def test_watermarks_in_the_wrong_order_name_both_flags(capsys):
    assert main(SIM + ["--policy", "watermark", "--capacity", "1GiB", "--high", "0.5", "--low", "0.8"]) == 2
    err = capsys.readouterr().err
    assert "--low 0.8 is above --high 0.5" in err and "low_watermark" not in err


def test_negative_values_reach_their_check():
    assert join_negative_values(["simulate", "--capacity", "-5GiB", "--json"]) == \
        ["simulate", "--capacity=-5GiB", "--json"]
    assert join_negative_values(["--x", "-.5", "--y=-1", "-h"]) == ["--x=-.5", "--y=-1", "-h"]
    assert join_negative_values(["--json", "--trace", "t"]) == ["--json", "--trace", "t"]


def test_capacity_is_echoed_for_people(capsys):
    """`--capacity 1TiB` was echoed as 1.02e+03 GiB."""
    assert main(SIM + ["--capacity", "1TiB"]) == 0
    out = capsys.readouterr().out
    assert "(1 TiB)" in out and "e+" not in out


def test_a_trace_without_classes_suggests_class(tmp_path, capsys):
    """A trace whose name is not recognised is all 'default': `--ttl chatbot=60s` must say `--class chatbot`."""
    from tiered_kv.sim.traces import shipped_trace

    path = tmp_path / "mytrace.jsonl"
    path.write_bytes(shipped_trace("conversation").read_bytes())
    assert main(["simulate", "--trace", str(path), "--policy", "ttl", "--ttl", "chatbot=60s"]) == 2
    err = capsys.readouterr().err
    assert "['default']" in err and "--class chatbot" in err
    assert main(["simulate", "--trace", str(path), "--class", "chatbot", "--policy", "ttl",
                 "--ttl", "chatbot=60s", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["by_class"]["chatbot"]["hit_tokens"] > 0


def test_curves_expose_belady_hit_tokens_and_the_fifo_trie_curve(capsys):
    """`bench peers` computed kvcache.ai's FIFO-trie curve and Belady's hit tokens; `curves` now prints both."""
    from tiered_kv.sim.peers.semantics import get_semantics
    from tiered_kv.sim.peers.simulators import ours_kvcache
    from tiered_kv.sim.traces import load_trace, shipped_trace

    base = ["curves", "--trace", "conversation", "--points", "4", "--ttl-points", "3", "--belady-points", "2", "--json"]
    assert main(base + ["--semantics", "kvcache-ai"]) == 0
    out = json.loads(capsys.readouterr().out)
    caps_blocks = np.array(out["capacity_tokens"]) // out["block_size"]
    want = ours_kvcache(load_trace(shipped_trace("conversation")), caps_blocks, "fifo")
    assert out["fifo_trie_hit_tokens"] == [int(h) for h in want]
    assert out["fifo_trie_token_hit_rate"] == pytest.approx([h / out["input_tokens"] for h in want])
    opt = ours_kvcache(load_trace(shipped_trace("conversation")), caps_blocks, "optimal")
    got = [(i, h) for i, h in enumerate(out["belady_hit_tokens"]) if h is not None]
    assert len(got) == 2 and all(h == int(opt[i]) for i, h in got)
    assert get_semantics("kvcache-ai").lru_policy == "lru-trie"
    assert main(base) == 0  # the default semantics: Belady hit tokens, FIFO-trie only when asked
    plain = json.loads(capsys.readouterr().out)
    assert "fifo_trie_hit_tokens" not in plain
    for h, r in zip(plain["belady_hit_tokens"], plain["belady_token_hit_rate"], strict=True):
        assert (h is None) == (r is None)
        if h is not None:
            assert h / plain["input_tokens"] == pytest.approx(r)
    assert main(base + ["--fifo-trie"]) == 0
    assert len(json.loads(capsys.readouterr().out)["fifo_trie_hit_tokens"]) == 4


@pytest.mark.parametrize("argv,flag,range_", [
    # the library's own parameter names reached the user: "days:", "policy:", "preset:"
    (["simulate", "--synth", "mixed", "--days", "0"], "--days", "(0, 3650]"),
    (["simulate", "--synth", "mixed", "--days", "5000"], "--days", "(0, 3650]"),
    (["simulate", "--synth", "mixed", "--days", "two weeks"], "--days", "(0, 3650]"),
    (SIM + ["--policy", "nosuch"], "--policy", "s3fifo"),
    (["simulate", "--synth", "nosuch"], "--synth", "mixed"),
    (["retention", "--synth", "nosuch"], "--synth", "chatbot, agent, mixed, ci"),
    (["retention", "--synth", "mixed", "--days", "0"], "--days", "(0, 3650]"),
    # --days belongs to --synth, in every command that loads --trace (commands/_common.load_compiled)
    (["retention", "--trace", "conversation", "--days", "3"], "--days", "only with --synth"),
    (["simulate", "--trace", "conversation", "--days", "3"], "--days", "only with --synth"),
    (["simulate", "--trace", "conversation", "--nodes", "2", "--days", "3"], "--days", "only with --synth"),
    (["curves", "--trace", "conversation", "--policy", "nosuch", "--points", "2"], "--policy", "s3fifo"),
    (["day", "generate", "ROOT", "--days", "0"], "--days", "(0, 60]"),
    (["bench", "synth", "--days", "0"], "--days", "> 0"),
])
def test_errors_name_the_flag_typed_not_the_parameter(argv, flag, range_, capsys, tmp_path):
    argv = [str(tmp_path / "day") if a == "ROOT" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert flag in first and range_ in first, err
    for internal in ("days:", "policy:", "preset:"):
        assert f"error: {internal}" not in first, err
    assert "Traceback" not in err and not (tmp_path / "day").exists()


def test_simulate_help_lists_every_registered_policy(capsys):
    from tiered_kv.sim.policies import policy_names

    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")  # argparse wraps lines, also at hyphens
    names = policy_names()
    assert len(names) >= 17 and {"s3fifo", "arc", "lru-trie", "belady-nobypass"} <= set(names)
    for name in names:
        assert f" {name}," in text or f" {name} (" in text, name


def test_a_library_parameter_name_becomes_the_flag():
    from tiered_kv.cli_args import name_flags

    flags = {"days": "--days", "preset": "--synth"}
    assert name_flags("days: must be in (0, 3650], got 0.0", flags) == "--days: must be in (0, 3650], got 0.0"
    assert name_flags("SynthConfig.preset: bad", flags) == "--synth: bad"
    assert name_flags("--days: already a flag", flags) == "--days: already a flag"
    assert name_flags("seed: not a flag here", flags) == "seed: not a flag here"
    flags = {"low_watermark": "--low", "high_watermark": "--high", "block_size": "--block-size"}
    assert name_flags("low_watermark: must be in [0, high_watermark=0.9], got 1.0", flags) \
        == "--low: must be in [0, --high=0.9], got 1.0"  # a parameter quoted with its value, too
    assert name_flags("kv: not a multiple of block_size=4", flags) == "kv: not a multiple of block_size=4"
    # the user's own input, echoed in quotes, stays as typed
    assert name_flags("low_watermark: cannot parse 'high_watermark=1' as a fraction", flags) \
        == "--low: cannot parse 'high_watermark=1' as a fraction"
    # a parameter and the word naming one of its entries (a class, a policy): the entry's own
    # settings after it are not the command's flags
    flags = {"ttl": "--ttl", "policy": "--policy", "capacity": "--capacity"}
    assert name_flags("ttl agent: 'soon' is out of range", flags) == "--ttl agent: 'soon' is out of range"
    assert name_flags("policy mine: parameter capacity is required (give capacity=VALUE)", flags) \
        == "--policy mine: parameter capacity is required (give capacity=VALUE)"
    assert name_flags("trace x.jsonl: no rows", flags) == "trace x.jsonl: no rows"
