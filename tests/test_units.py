import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiered_kv.units import format_bytes, format_duration, parse_bytes, parse_duration


@pytest.mark.parametrize("text,seconds", [("90", 90), ("90s", 90), ("15m", 900), ("6h", 21600),
                                          ("3d", 259200), ("1.5d", 129600), ("inf", math.inf)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["-1d", "3 weeks", "", "d3"])
def test_parse_duration_rejects_with_name(bad):
    with pytest.raises(ValueError, match="ttl.chatbot"):
        parse_duration(bad, name="ttl.chatbot")


@pytest.mark.parametrize("text,n", [("890", 890), ("64MiB", 64 * 2**20), ("1.5GB", 1_500_000_000),
                                    ("100PiB", 100 * 2**50)])
def test_parse_bytes(text, n):
    assert parse_bytes(text) == n


def test_parse_bytes_rejects():
    with pytest.raises(ValueError, match="capacity"):
        parse_bytes("12 parsecs", name="capacity")


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_duration_format_round_trips(seconds):
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, rel=1e-5)


def test_format_bytes():
    assert format_bytes(890) == "890 B"
    assert format_bytes(3 * 2**20) == "3 MiB"
