"""experiments/migrate_records.py: re-pricing a stored record reproduces what training wrote, and
records the stored numbers do not determine are dropped by reason."""

from __future__ import annotations

import json

import pytest

from codesign import cli
from codesign.experiment import load_grid, versions
from codesign.hwmodel import presets
from experiment_modules import load


@pytest.mark.parametrize("quantizer", ["fixed", "learned"])
def test_recost_of_a_fresh_record_reproduces_its_cost_and_key(cora, tmp_path, quantizer):
    """Both stores priced (Cora's features cost less CSR on h100), learned widths carried back in."""
    assert cli.main(["sweep", "--cost-weights", "1", "--seeds", "1", "--epochs", "2", "--quantizer", quantizer,
                     "--out", str(tmp_path)]) == 0
    path = tmp_path / "cora_gcn_h100.jsonl"
    stored = [json.loads(line) for line in path.read_text().splitlines()]
    mig = load("migrate_records")
    for rec in stored:
        new, why = mig.recost(rec, cora, presets.get("h100"))
        assert why is None and new["key"] == rec["key"] and new["versions"] == versions()
        assert new["dense_feature_store"] == "csr"
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


def test_only_a_record_from_before_versions_is_renamed():
    """``codesign`` without a revision was issue 7's joint method in records that predate
    ``versions``; a versioned record's ``codesign`` is today's flagship and keeps its label."""
    relabel = load("migrate_records").relabel
    assert relabel({"method": "codesign"}, legacy=True)["method"] == "codesign_v1"
    assert relabel({"method": "codesign"}, legacy=False)["method"] == "codesign"
    assert relabel({"method": "codesign", "revision": 1}, legacy=True)["method"] == "codesign"
    # a versioned flagship record is its resolved configuration: no settings label to supersede it
    flagship = {"method": "codesign", "dataset": "cora", "model": "gcn", "train": {}}
    assert relabel(flagship, legacy=False) == flagship
