"""Trace loading: the shipped trace, every format, and clear errors on bad input."""

from __future__ import annotations

import json
import warnings

import polars as pl
import pytest

from tiered_kv.sim.traces import SCHEMA, load_trace, random_trace, shipped_trace, validate_frame


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_shipped_conversation_trace_matches_published_statistics():
    df = load_trace(shipped_trace("conversation"))
    assert dict(df.schema) == SCHEMA
    assert df.height == 12031
    assert round(df["input_length"].mean()) == 12035  # Mooncake Table 2
    assert round(df["output_length"].mean()) == 343
    assert 3536 <= df["timestamp_s"].max() <= 3537
    assert set(df["traffic_class"].unique()) == {"chatbot"}
    assert (df["block_ids"].list.first() == 0).all()  # shared system prompt block
    # chained ids: an id always follows the same parent id
    pairs = df.select(pl.col("block_ids").alias("b"), pl.col("block_ids").list.shift(1).alias("p")) \
        .explode(["b", "p"]).unique()
    assert pairs["b"].n_unique() == pairs.height


def test_mooncake_timestamps_are_converted_to_seconds(tmp_path):
    p = write_jsonl(tmp_path / "t.jsonl", [
        {"timestamp": 1500, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}])
    df = load_trace(p, traffic_class="agent")
    assert df["timestamp_s"].to_list() == [1.5] and df["traffic_class"].to_list() == ["agent"]
    assert df["block_size"].to_list() == [512] and df["request_id"].to_list() == [0]


@pytest.mark.parametrize("line, match", [
    ('{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]\n', r"t\.jsonl:2: not valid JSON"),
    ('{"timestamp": 0, "input_length": 600, "hash_ids": [0, 1]}\n', r"t\.jsonl:2: field 'output_length' is missing"),
    ('{"timestamp": 0, "input_length": "x", "output_length": 3, "hash_ids": [0, 1]}\n', r":2: field 'input_length'"),
    ('{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1, 2]}\n',
     r"t\.jsonl:2: field 'hash_ids' has 3 block ids, inconsistent with input_length 600"),
])
def test_bad_lines_name_file_line_and_field(tmp_path, line, match):
    good = '{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [0]}\n'
    p = tmp_path / "t.jsonl"
    p.write_text(good + line + good)
    with pytest.raises(ValueError, match=match):
        load_trace(p, format="mooncake")


def test_a_format_that_accepts_full_blocks_only_says_so(tmp_path):
    """Generic block ids may stop at the last full block: the message gives both counts."""
    p = write_jsonl(tmp_path / "g.jsonl", [
        {"timestamp_s": 0, "input_length": 10, "block_size": 4, "block_ids": [1, 2, 3, 4, 5]}])
    with pytest.raises(ValueError, match=r"g\.jsonl:1: .*expected ceil\(10/4\) = 3 or floor\(10/4\) = 2\)"):
        load_trace(p)


def test_out_of_order_timestamps_are_sorted_with_a_warning(tmp_path):
    p = write_jsonl(tmp_path / "t.jsonl", [
        {"timestamp": 2000, "input_length": 10, "output_length": 1, "hash_ids": [0]},
        {"timestamp": 1000, "input_length": 10, "output_length": 1, "hash_ids": [1]}])
    with pytest.warns(UserWarning, match="out of order"):
        df = load_trace(p)
    assert df["timestamp_s"].to_list() == [1.0, 2.0] and df["request_id"].to_list() == [1, 0]


def test_empty_and_missing_traces_are_errors(tmp_path):
    (tmp_path / "e.jsonl").write_text("")
    with pytest.raises(ValueError, match="empty"):
        load_trace(tmp_path / "e.jsonl")
    with pytest.raises(FileNotFoundError):
        load_trace(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="empty"):
        validate_frame(random_trace(0).head(0))


def test_bailian_ids_are_chained_by_longest_prefix(tmp_path):
    p = write_jsonl(tmp_path / "qwen.jsonl", [
        {"chat_id": 10, "parent_chat_id": -1, "timestamp": 1.0, "input_length": 48, "output_length": 5,
         "type": "text", "turn": 1, "hash_ids": [7, 8, 9]},
        {"chat_id": 11, "parent_chat_id": 10, "timestamp": 2.5, "input_length": 64, "output_length": 5,
         "type": "text", "turn": 2, "hash_ids": [7, 8, 9, 4]},
        {"chat_id": 12, "parent_chat_id": -1, "timestamp": 3.0, "input_length": 40, "output_length": 5,
         "type": "search", "turn": 1, "hash_ids": [7, 5, 9]},
    ])
    df = load_trace(p)
    a, b, c = df["block_ids"].to_list()
    assert b[:3] == a and c[0] == a[0]
    assert c[1] != a[1] and c[2] != a[2]  # same per-block hash after a different prefix: new id
    assert df["session_id"].to_list() == ["10", "10", "12"]
    assert df["traffic_class"].to_list() == ["text", "text", "search"]
    assert df["block_size"].unique().to_list() == [16] and df["turn"].to_list() == [1, 2, 1]


def test_generic_formats_jsonl_csv_parquet_agree(tmp_path):
    rows = [{"timestamp_s": 0.5, "token_ids": list(range(10)), "block_size": 4, "traffic_class": "agent"},
            {"timestamp_s": 1.0, "token_ids": list(range(8)) + [99], "block_size": 4, "traffic_class": "agent"}]
    df = load_trace(write_jsonl(tmp_path / "g.jsonl", rows))
    a, b = df["block_ids"].to_list()
    assert len(a) == 3 and a[:2] == b[:2] and a[2] != b[2]
    assert df["input_length"].to_list() == [10, 9]
    blocks = pl.DataFrame({"timestamp_s": [0.0, 1.0], "block_ids": [[5, 6], [5, 7]], "block_size": [16, 16],
                           "input_length": [32, 20]})
    blocks.write_parquet(tmp_path / "g.parquet")
    dp = load_trace(tmp_path / "g.parquet")
    (tmp_path / "g.csv").write_text('timestamp_s,block_ids,block_size,input_length\n0.0,"5 6",16,32\n1.0,"5 7",16,20\n')
    dc = load_trace(tmp_path / "g.csv")
    assert dp["block_ids"].to_list() == dc["block_ids"].to_list()
    x, y = dp["block_ids"].to_list()
    assert x[0] == y[0] and x[1] != y[1]
    bad = pl.DataFrame({"timestamp_s": [0.0], "block_ids": [[5, 6, 7]], "block_size": [16], "input_length": [20]})
    bad.write_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match=r"row 0: field 'block_ids' has 3 block ids"):
        load_trace(tmp_path / "bad.parquet")


def test_random_trace_is_valid_and_deterministic():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert random_trace(3).equals(random_trace(3))
