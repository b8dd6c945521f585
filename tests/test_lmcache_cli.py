"""`tiered-kv lmcache export|import`: atomic output, logs with a partial last chunk."""

import json

import pytest

from tiered_kv.cli import main


def _event(ts, seq_len, hashes, chunk=256, **kw):
    return json.dumps({"timestamp": ts, "request_id": f"r{ts}", "model_name": "m", "chunk_size": chunk,
                       "seq_len": seq_len, "dtypes": ["bfloat16"], "shapes": [[2, chunk, 8]],
                       "chunk_hashes": hashes, **kw})


def test_export_failure_leaves_no_output_file(tmp_path, capsys):
    out = tmp_path / "lookup_hashes_x.jsonl"
    assert main(["lmcache", "export", "--trace", "conversation", "--bytes-per-token", "1", str(out)]) == 2
    assert "--bytes-per-token" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no empty file, no temporary left behind
    assert main(["lmcache", "export", "--trace", "conversation", "--bytes-per-token", "0", str(out)]) == 2
    assert "--bytes-per-token: must be an integer >= 1" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_export_then_import_round_trip(tmp_path, capsys):
    out = tmp_path / "lookup_hashes_x.jsonl"
    assert main(["lmcache", "export", "--trace", "conversation", str(out)]) == 0
    assert [p.name for p in tmp_path.iterdir()] == [out.name]
    trace = tmp_path / "t.parquet"
    assert main(["lmcache", "import", str(out), "--out", str(trace)]) == 0
    assert "12,031 requests" in capsys.readouterr().out


def test_import_accepts_a_hash_for_the_partial_last_chunk(tmp_path, capsys):
    import polars as pl

    log = tmp_path / "lookup_hashes_all.jsonl"
    log.write_text("\n".join([
        _event(1.0, 600, ["0x1", "0x2", "0x3"]),  # 600 = 2 full chunks + 88 tokens: "all" mode
        _event(2.0, 512, ["0x1", "0x2"]),  # exact multiple: unchanged
        _event(3.0, 300, ["0x1"]),  # complete-chunks-only event in the same log
    ]) + "\n")
    out = tmp_path / "t.parquet"
    assert main(["lmcache", "import", str(log), "--out", str(out)]) == 0
    cap = capsys.readouterr()
    assert "dropped 1 partial-last-chunk hashes" in cap.err and "3 requests (5 chunks)" in cap.out
    df = pl.read_parquet(out)
    assert df["input_length"].to_list() == [600, 512, 300]
    assert df["block_ids"].list.len().to_list() == [2, 2, 1]


def test_import_says_exactly_why_not(tmp_path, capsys):
    log = tmp_path / "lookup_hashes_bad.jsonl"
    log.write_text(_event(1.0, 600, ["0x1", "0x2", "0x3", "0x4"]) + "\n")
    assert main(["lmcache", "import", str(log), "--out", str(tmp_path / "t.parquet")]) == 2
    err = capsys.readouterr().err
    assert f"{log}:1: field 'chunk_hashes' has 4 hashes; seq_len 600 // chunk_size 256 = 2" in err
    assert "only one extra hash, for a partial last chunk" in err
    good, bad = tmp_path / "lookup_hashes_1.jsonl", tmp_path / "lookup_hashes_2.jsonl"
    good.write_text(_event(1.0, 600, ["0x1", "0x2", "0x3"]) + "\n")
    bad.write_text(_event(2.0, 512, ["0x1", "0x2"]) + "\nnot json\n")
    assert main(["lmcache", "import", str(good), str(bad), "--out", str(tmp_path / "t.parquet")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2: not valid JSON" in err  # the user's file and line, not a temporary copy
    assert not (tmp_path / "t.parquet").exists()


@pytest.mark.parametrize("name", ["t.csv"])
def test_import_rejects_a_non_parquet_out(tmp_path, capsys, name):
    log = tmp_path / "lookup_hashes_1.jsonl"
    log.write_text(_event(1.0, 512, ["0x1", "0x2"]) + "\n")
    assert main(["lmcache", "import", str(log), "--out", str(tmp_path / name)]) == 2
    assert "--out: must end in .parquet" in capsys.readouterr().err
