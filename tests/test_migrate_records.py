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
    # a file of which no record can be re-priced (another tool's runs) is left as it is, not emptied
    other = tmp_path / "selection_runs.jsonl"
    other.write_text(json.dumps(block) + "\n" + json.dumps(scaled) + "\n")
    before = other.read_bytes()
    assert load("migrate_records").migrate_file(other) == {"untouched (no record re-priced)": 2}
    assert other.read_bytes() == before


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


def test_a_feature_masked_record_reprices_its_kept_columns_nonzeros_exactly(cora):
    """Training stores the kept columns' share of the input nonzeros (``feature_nnz_kept``), so a
    feature-masked run's CSR store re-prices exactly; an older record without it is priced at a
    uniform share and says so (``repriced_approx``)."""
    from codesign.experiment import make_record, run_key
    from codesign.train import TrainConfig, train
    cfg = TrainConfig.from_flat(seed=0, epochs=30, cost_weight=3.0, gate_lr=0.3, bits=8, edge_mask=False,
                                sparse_features=True)
    hw = presets.get("hygcn")
    r = train(cora, cfg, hw)
    r.pop("by_hw")
    assert r["densities"]["feature"] < 0.95 and 0 < r["feature_nnz_kept"] < 1
    rec = make_record(run_key("cora", "hygcn", cfg), {"dataset": "cora", "hw": "hygcn", **cfg.flat()}, r)
    mig = load("migrate_records")
    new, why = mig.recost(rec, cora, hw)
    assert why is None and "repriced_approx" not in new
    assert new["modeled"]["energy_j"] == pytest.approx(rec["modeled"]["energy_j"], rel=1e-5)
    old = {k: v for k, v in rec.items() if k != "feature_nnz_kept"}
    approx, _ = mig.recost(old, cora, hw)
    assert approx["repriced_approx"].startswith("CSR input priced at the kept fraction")
    assert approx["modeled"]["energy_j"] != pytest.approx(rec["modeled"]["energy_j"], rel=1e-3)


def test_a_record_priced_as_today_under_the_former_reference_name_keeps_its_costs(cora):
    """``best_dense_store`` with ``cost.sparse_features`` priced both stores, as every run is now:
    such a record is re-keyed and re-stamped, its costs (exact kept columns) kept."""
    from codesign.experiment import make_record, run_key
    from codesign.train import TrainConfig
    cfg = TrainConfig.from_flat(seed=0, bits=8, sparse_features=True)
    costs = {"modeled": {"energy_j": 1.5, "latency_s": 2.0, "dram_bytes": 3.0},
             "dense_modeled": {"energy_j": 4.0, "latency_s": 5.0, "dram_bytes": 6.0}}
    rec = make_record("old", {"dataset": "cora", "hw": "h100", **cfg.flat()},
                      {"test_accuracy": 0.8, "val_accuracy": 0.8, "densities": {"edge": 1.0, "feature": 0.5},
                       "layer_bits": {}, **costs})
    rec["versions"] = {**versions(), "reference": "best_dense_store"}
    mig = load("migrate_records")
    new, why = mig.recost(rec, cora, presets.get("h100"))
    assert why is None and new["versions"] == versions() and new["key"] == run_key("cora", "h100", cfg)
    assert {k: new[k] for k in costs} == costs
    off = dict(rec, config={**rec["config"], "sparse_features": False})  # priced dense-stored: re-priced
    again, _ = mig.recost(off, cora, presets.get("h100"))
    assert again["modeled"] != costs["modeled"] and again["dense_feature_store"] == "csr"
