import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiered_kv.units import (
    format_bytes,
    format_duration,
    format_tokens,
    parse_bytes,
    parse_duration,
    parse_tokens,
    parse_ttl,
)


@pytest.mark.parametrize("text,seconds", [("90", 90), ("90s", 90), ("15m", 900), ("6h", 21600),
                                          ("3d", 259200), ("1.5d", 129600), ("inf", math.inf)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["-1d", "3 weeks", "", "d3"])
def test_parse_duration_rejects_with_name(bad):
    with pytest.raises(ValueError, match="ttl.chatbot"):
        parse_duration(bad, name="ttl.chatbot")


def test_parse_ttl_is_one_grammar_for_flags_lists_and_tables():
    assert parse_ttl("agent=3d, chatbot=7d") == ({"agent": 259_200.0, "chatbot": 604_800.0}, None)
    assert parse_ttl(["chatbot=1h", "agent=1d,2h", "3h"]) == ({"chatbot": 3600.0, "agent": 86_400.0}, 10_800.0)
    assert parse_ttl({"agent": 60}) == ({"agent": 60.0}, None)
    for bad, where in (("agent=soon", "--ttl agent"), ("=3d", "--ttl"), ("agent=3d,", "--ttl"), (5, "--ttl")):
        with pytest.raises(ValueError, match=f"^{where}: .* allowed: a duration"):
            parse_ttl(bad, name="--ttl")


@pytest.mark.parametrize("text,n", [("890", 890), ("64MiB", 64 * 2**20), ("1.5GB", 1_500_000_000),
                                    ("100PiB", 100 * 2**50)])
def test_parse_bytes(text, n):
    assert parse_bytes(text) == n


def test_parse_bytes_rejects():
    with pytest.raises(ValueError, match="capacity"):
        parse_bytes("12 parsecs", name="capacity")


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_duration_format_round_trips_to_the_precision_shown(seconds):
    # two units, rounded to the smaller: "1 d 0 h" is within half an hour of 24.5 h
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, rel=0.021, abs=0.006)


@pytest.mark.parametrize("seconds,text", [
    (0, "0 s"), (0.25, "0.25 s"), (12.5, "12.5 s"), (45, "45 s"), (60, "1 m"),
    (17.3333 * 60, "17 m 20 s"),  # was "17.3333m"
    (2.99769 * 86400, "3 d"),  # was "2.99769d"
    (2.59e5, "3 d"),  # a TTL slider readout, was "2.59e+5 s"
    (1.5 * 86400, "1 d 12 h"), (14 * 86400, "14 d"), (3 * 3600 + 9 * 60, "3 h 9 m"), (math.inf, "inf"),
])
def test_format_duration_for_people(seconds, text):
    assert format_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(seconds, rel=0.01, abs=0.005)


@pytest.mark.parametrize("n,text", [
    (890, "890 B"), (1023, "1023 B"), (1024, "1 KiB"), (3 * 2**20, "3 MiB"), (2**40, "1 TiB"),
    (1023.9 * 2**30, "1 TiB"),  # was "1.02e+03 GiB"
    (2.73e12, "2.48 TiB"),  # was "2.73e+12"
    (24.6 * 2**40, "24.6 TiB"), (100 * 2**50, "100 PiB"), (math.inf, "unlimited"),
])
def test_format_bytes(n, text):
    assert format_bytes(n) == text
    assert "e+" not in text


@pytest.mark.parametrize("n,text", [(512, "512 tokens"), (9000, "9,000 tokens"), (12_345, "12.3K tokens"),
                                    (4.5e6, "4.5M tokens"), (1.2e9, "1.2B tokens"), (999_999, "1M tokens")])
def test_format_tokens(n, text):
    assert format_tokens(n) == text
    assert parse_tokens(text) == pytest.approx(n, rel=0.005)


def test_parse_tokens_rejects_with_name():
    with pytest.raises(ValueError, match="capacity"):
        parse_tokens("-5", name="capacity")
    with pytest.raises(ValueError, match="capacity"):
        parse_tokens("5 parsecs", name="capacity")


def test_an_infinite_size_is_a_named_error_not_an_overflow():
    for bad in ("1e999GB", float("inf")):
        with pytest.raises(ValueError, match="^--capacity: must be a finite size in bytes"):
            parse_bytes(bad, name="--capacity")
