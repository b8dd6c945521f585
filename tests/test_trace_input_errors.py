"""Bad trace files: one line naming file, line (or row) and field, exit status 2 (issue 17)."""

import pytest

from tiered_kv.cli import main

CASES = [
    ("big.jsonl", b'{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n'
                  b'{"timestamp": 2, "input_length": 100000000000000000000, "output_length": 1, "hash_ids": [1]}\n',
     ":2: field 'input_length' is out of range"),
    ("bad.csv", b'timestamp_s,input_tokens,output_tokens,block_ids\nxyz,10,1,"1 2"\n', ":2: field 'timestamp_s'"),
    ("bad2.csv", b'timestamp_s,input_tokens,output_tokens,block_ids,block_size\n1,10,1,"3 x",16\n',
     ":2: field 'block_ids'"),
    ("bad8.jsonl", b'\xff\xfe{"a":1}\n', ":1: not UTF-8 text"),
    ("bad.parquet", b"garbage\n", "not a readable Parquet trace"),
]


@pytest.mark.parametrize("name,data,msg", CASES)
def test_bad_trace_names_file_line_and_field(tmp_path, capsys, name, data, msg):
    path = tmp_path / name
    path.write_bytes(data)
    assert main(["simulate", "--trace", str(path), "--policy", "lru", "--capacity", "1000000"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and msg in err, err
