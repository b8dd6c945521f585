"""Bad trace files: one line naming file, line (or row) and field, exit status 2."""

import pytest

from tiered_kv.cli import main

CASES = [
    ("big.jsonl", b'{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n'
                  b'{"timestamp": 2, "input_length": 100000000000000000000, "output_length": 1, "hash_ids": [1]}\n',
     ":2: field 'input_length' is out of range"),
    ("bad.csv", b'timestamp_s,input_tokens,output_tokens,block_ids\nxyz,10,1,"1 2"\n', ":2: field 'timestamp_s'"),
    ("bad2.csv", b'timestamp_s,input_tokens,output_tokens,block_ids,block_size\n1,10,1,"3 x",16\n',
     ":2: field 'block_ids'"),
    # a quoted field spanning two lines (a session id here) moves the bad row to line 4
    ("bad3.csv", b'timestamp_s,input_tokens,output_tokens,block_ids,session_id\n0,10,1,"1 2","a\nb"\n'
                 b'1,10,1,"3 x","c"\n', ":4: field 'block_ids'"),
    ("bad8.jsonl", b'\xff\xfe{"a":1}\n', ":1: not UTF-8 text"),
    ("bad.parquet", b"garbage\n", "not a readable Parquet trace"),
]

#: A generic JSONL trace whose line 2 holds a bad token (or block) id: polars gives the whole
#: column one type, so line 1's good ids read as strings or floats too; the error must say line 2.
_GOOD = b'{"timestamp_s": 0, "block_size": 4, "%s": [1, 2, 3]}\n'
_BAD = b'{"timestamp_s": 1, "block_size": 4, "%s": [1, %s, 3]}\n'
for _field, _blank in ((b"token_ids", b""), (b"block_ids", b"\n")):  # a blank line moves the bad one to 3
    for _i, _value in enumerate((b"-5", b'"x"', b"1.5", b"true", b"null", b"99999999999999999999")):
        CASES.append((f"{_field.decode()}{_i}.jsonl", _GOOD % _field + _blank + _BAD % (_field, _value),
                      f":{3 if _blank else 2}: field '{_field.decode()}' must be a list of integers >= 0"))


@pytest.mark.parametrize("name,data,msg", CASES)
def test_bad_trace_names_file_line_and_field(tmp_path, capsys, name, data, msg):
    path = tmp_path / name
    path.write_bytes(data)
    assert main(["simulate", "--trace", str(path), "--policy", "lru", "--capacity", "1000000"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and msg in err, err
