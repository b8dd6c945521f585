"""data/checkpoints/README.md is what scripts/checkpoint_readme.py renders from the committed JSON.

Every number in that README (losses, gains, the stages' steps and wall time) must come from the
training record and the eval JSON beside it; a README edited by hand, or JSON updated without
re-rendering, fails here.
"""

import json
from pathlib import Path

import pytest

from tiered_kv.testing.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
CK = ROOT / "data" / "checkpoints"


def _renderer():
    return load_script("checkpoint_readme")


@pytest.mark.skipif(not (CK / "small.eval.json").exists(), reason="no committed eval")
def test_committed_readme_is_the_render_of_the_committed_json():
    mod = _renderer()
    record = json.loads((CK / "small.json").read_text())
    ev = json.loads((CK / "small.eval.json").read_text())
    base = CK / "small-base.eval.json"
    base_ev = json.loads(base.read_text()) if "previous_stage" in record and base.exists() else None
    assert (CK / "README.md").read_text() == mod.render(record, ev, "small", base_ev)


def test_two_stage_record_renders_both_stages_and_the_targets():
    mod = _renderer()
    record = json.loads((CK / "small.json").read_text())
    ev = json.loads((CK / "small.eval.json").read_text())
    stage = dict(record.get("previous_stage") or record)
    two = {**record, "previous_stage": stage, "init_from": "data/checkpoints/small-base.pt",
           "tokens_seen_all_stages": record["tokens_seen"] + stage["tokens_seen"]}
    out = mod.render(two, {**ev, "long_context_gain_nats": 0.25}, "small", {**ev, "long_context_gain_nats": -0.03})
    assert "Two stages" in out and "--init" not in out.split("```bash")[1].split("\n")[1]  # stage 1 first
    minutes = (stage["seconds"] + record["seconds"]) / 60
    assert f"{minutes:.0f} min of wall time in all" in out
    assert "| 0.250 nats/byte" in out and "| -0.030 | 0.250 | +0.280 |" in out
