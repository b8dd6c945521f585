"""`tiered-kv store stats|verify|gc` on a store filled by SSDTier.put."""

import json
import time

import pytest
import torch

from tiered_kv.cli import main
from tiered_kv.keys import block_keys
from tiered_kv.testing.store_suite import make_kv, namespace
from tiered_kv.tiers.ssd import SSDConfig, SSDTier, layout
from tiered_kv.units import DAY_S


@pytest.fixture
def filled(tmp_path):
    now = time.time()
    t = SSDTier(tmp_path, namespace=namespace(), clock=lambda: now - 4 * DAY_S, config=SSDConfig(background_touch=False))
    t.put(torch.arange(32), make_kv(32), "agent")  # 4 chunks, last access 4 days ago
    t2 = SSDTier(tmp_path, namespace=namespace(), config=SSDConfig(background_touch=False))
    t2.put(torch.arange(500, 516), make_kv(16), "chatbot")  # 2 chunks, now
    return tmp_path


def _json(capsys, *argv) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_stats(filled, capsys):
    s = _json(capsys, "store", "stats", str(filled), "--json")
    assert s["chunks"] == 6 and s["tokens"] == 48
    assert s["by_class"]["agent"]["chunks"] == 4 and s["by_class"]["chatbot"]["chunks"] == 2
    assert s["age_since_last_access"]["3d-7d"] == 4 and s["age_since_last_access"]["<1h"] == 2
    assert main(["store", "stats", str(filled)]) == 0
    assert "by_class" in capsys.readouterr().out


def test_gc_dry_run_then_real(filled, capsys):
    r = _json(capsys, "store", "gc", str(filled), "--dry-run", "--ttl", "agent=3d", "--ttl", "chatbot=7d", "--json")
    assert r["expired_chunks"] == 4 and r["expired_by_class"] == {"agent": 4}
    assert _json(capsys, "store", "stats", str(filled), "--json")["chunks"] == 6
    r = _json(capsys, "store", "gc", str(filled), "--ttl", "agent=3d", "--ttl", "chatbot=7d", "--json")
    assert r["removed_chunks"] == 4
    # chatbot chunks expire 7 days from now, and the capacity watermark applies too
    assert _json(capsys, "store", "gc", str(filled), "--ttl", "7d", "--now", "+6d", "--json")["removed_chunks"] == 0
    r = _json(capsys, "store", "gc", str(filled), "--capacity", "1KiB", "--json")
    assert r["evicted_chunks"] == 2 and r["bytes_after"] == 0


def test_gc_a_class_ttl_beats_a_bare_one_as_in_simulate(filled, capsys):
    # agent chunks were last touched 4 days ago, chatbot ones now
    r = _json(capsys, "store", "gc", str(filled), "--dry-run", "--ttl", "1d", "--ttl", "agent=5d", "--json")
    assert r["expired_chunks"] == 0
    r = _json(capsys, "store", "gc", str(filled), "--dry-run", "--ttl", "agent=5d,1h", "--now", "+2h", "--json")
    assert r["expired_by_class"] == {"chatbot": 2}
    r = _json(capsys, "store", "gc", str(filled), "--dry-run", "--ttl", "6d", "--ttl", "agent=3d", "--json")
    assert r["expired_by_class"] == {"agent": 4}


def test_verify_reports_and_repairs(filled, capsys):
    path = filled / layout.chunk_path(block_keys(torch.arange(32), namespace())[1])
    data = bytearray(path.read_bytes())
    data[-20] ^= 0x40
    path.write_bytes(bytes(data))
    assert main(["store", "verify", str(filled), "--no-repair", "--json"]) == 1
    r = json.loads(capsys.readouterr().out)
    assert r["chunks_ok"] == 5 and len(r["corrupt"]) == 1
    assert main(["store", "verify", str(filled), "--json"]) == 1  # found (and repaired) a problem
    r = json.loads(capsys.readouterr().out)
    assert r["removed_objects"] == 1 and r["repaired"] and not path.exists()
    assert _json(capsys, "store", "verify", str(filled), "--json")["corrupt"] == []  # clean: exit 0


def test_errors_are_one_line(tmp_path, capsys):
    assert main(["store", "stats", str(tmp_path / "missing")]) == 2
    assert "no store directory" in capsys.readouterr().err
    assert main(["store", "gc", str(tmp_path), "--ttl", "agent=soon"]) == 2
    assert capsys.readouterr().err.startswith("tiered-kv store: error: --ttl agent: 'soon' is out of range")
    assert main(["store", "gc", str(tmp_path), "--high", "0.5", "--low", "0.7"]) == 2
    assert "--low: must be in [0, --high=0.5]" in capsys.readouterr().err
    assert main(["store", "gc", str(tmp_path), "--high", "1.5"]) == 2
    assert "--high: must be in (0, 1], got 1.5" in capsys.readouterr().err
    assert main(["store", "stats", str(tmp_path), "--capacity", "0"]) == 2
    assert "--capacity: must be > 0 bytes, got 0" in capsys.readouterr().err
    assert main(["store", "gc", str(tmp_path), "--part", "3/2"]) == 2
    assert "part: must be i/n with 1 <= i <= n <= 16" in capsys.readouterr().err


@pytest.mark.parametrize("action", ["stats", "verify", "gc"])
def test_a_directory_that_is_not_a_store(tmp_path, capsys, action):
    (tmp_path / "notes.txt").write_text("my files")
    assert main(["store", action, str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path} is not an SSD-tier store" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # nothing created or removed


def test_a_store_with_a_damaged_root_is_still_a_store(filled, capsys):
    (filled / "zarr.json").unlink()
    assert _json(capsys, "store", "stats", str(filled), "--json")["chunks"] == 6


def test_gc_parts_split_the_work(filled, capsys):
    args = ["--ttl", "agent=3d", "--ttl", "chatbot=7d", "--json"]
    one = _json(capsys, "store", "gc", str(filled), "--part", "1/2", *args)
    two = _json(capsys, "store", "gc", str(filled), "--part", "2/2", *args)
    assert one["part"] == "1/2" and one["removed_chunks"] + two["removed_chunks"] == 4
    assert _json(capsys, "store", "stats", str(filled), "--json")["chunks"] == 2
