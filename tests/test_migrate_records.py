"""experiments/migrate_records.py: re-pricing a stored record reproduces what training wrote, and
records the stored numbers do not determine are dropped by reason."""

from __future__ import annotations

import json

import pytest

from codesign import cli
from codesign.experiment import load_grid, versions
from codesign.hwmodel import presets
from experiment_modules import load


def test_recost_of_a_fresh_record_reproduces_its_cost_and_key(cora, tmp_path):
    assert cli.main(["sweep", "--cost-weights", "1", "--seeds", "1", "--epochs", "2", "--out", str(tmp_path)]) == 0
    path = tmp_path / "cora_gcn_h100.jsonl"
    stored = [json.loads(line) for line in path.read_text().splitlines()]
    mig = load("migrate_records")
    for rec in stored:
        new, why = mig.recost(rec, cora, presets.get("h100"))
        assert why is None and new["key"] == rec["key"] and new["versions"] == versions()
        for field in ("modeled", "dense_modeled"):
            for cost in ("energy_j", "latency_s", "dram_bytes"):
                assert new[field][cost] == pytest.approx(rec[field][cost], rel=1e-5), (field, cost)


def test_migrate_file_reprices_old_records_and_drops_what_they_cannot_price(cora, tmp_path):
    assert cli.main(["sweep", "--cost-weights", "1", "--seeds", "1", "--epochs", "2", "--out", str(tmp_path)]) == 0
    path = tmp_path / "cora_gcn_h100.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    old = []
    for rec in recs:  # as an older cost model wrote them: other costs, no versions, another key
        rec = {**rec, "key": "old" + rec["key"], "modeled": {**rec["modeled"], "energy_j": 1.0}}
        del rec["versions"]
        old.append(rec)
    block = {**old[1], "key": "block", "config": {**old[1]["config"], "edge_sparsifier": "block", "edge_mask": True}}
    learned = {**old[1], "key": "learned", "config": {**old[1]["config"], "quantizer": "learned"},
               "layer_bits": {"conv1.x": 8.0, "conv1.w": 4.0}}
    scaled = {**old[1], "key": "scaled", "config": {**old[1]["config"], "devices": 2}}
    path.write_text("".join(json.dumps(r) + "\n" for r in old + [block, learned, scaled]))
    counts = load("migrate_records").migrate_file(path)
    assert counts == {"recosted": 2, "dropped:tiles": 1, "dropped:layer_bits": 1, "dropped:scale_out": 1}
    grid = load_grid(path)  # one version: loads
    assert sorted(r.key for r in grid) == sorted(r["key"] for r in recs)
    want = {r["key"]: r["modeled"]["energy_j"] for r in recs}
    assert {r.key: r.modeled["energy_j"] for r in grid} == pytest.approx(want)
