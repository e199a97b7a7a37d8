"""Smoke runs of the experiment scripts in their --quick mode (small grids): they run, write
their results atomically, and report finite metrics. Accuracy targets live in the full runs."""

import importlib.util
import json
import pathlib

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_hwmodel_validation_quick(tmp_path):
    out = tmp_path / "val.json"
    result = load("hwmodel_validation").main(["--quick", "--reps", "1", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["held_out"] == result["held_out"]
    n = len(saved["points"])
    assert n >= 20 and saved["held_out"]["n"] + saved["train"]["n"] == n
    assert {p["split"] for p in saved["points"]} == {"train", "test"}
    assert all(p["measured_s"] > 0 and np.isfinite(p["modeled_s"]) for p in saved["points"])
    assert -1.0 <= saved["held_out"]["spearman"] <= 1.0 and saved["held_out"]["mape"] >= 0
    f = saved["fitted"]
    assert 0 < f["matrix_efficiency"] <= 1 and 0 < f["vector_efficiency"] <= 1 and f["stage_overhead_s"] >= 0


def test_kernel_bench_quick(tmp_path):
    out = tmp_path / "kb.json"
    result = load("kernel_bench").main(["--quick", "--reps", "1", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["rows"] == result["rows"] and saved["pallas_timed"] is False  # CPU: no Pallas timing
    impls = {r["impl"] for r in saved["rows"]}
    assert {"segment", "bsr_xla", "bcsr"} <= impls
    for r in saved["rows"]:
        assert r["forward_ms"] > 0 and r["forward_backward_ms"] > 0 and r["gb_s"] > 0
    for fmt in saved["formats"].values():  # reordering raises tile density; condensed tiles are denser still
        assert fmt["bsr16_rcm_fill"] > fmt["bsr16_none_fill"]
        assert fmt["condensed16_rcm_fill"] > fmt["bsr16_rcm_fill"]


def test_sparsify_quant_quick_is_resumable(tmp_path, cora):
    mod = load("sparsify_quant")
    rows = mod.main(["--quick", "--out", str(tmp_path)])
    assert [r["method"] for r in rows] == list(mod.QUICK_METHODS)
    path = tmp_path / "cora_gcn_sparsify_quant_quick.jsonl"
    lines = path.read_text().splitlines()
    assert len(lines) == len(mod.QUICK_METHODS)
    block = next(r for r in rows if r["method"] == "block_mask_cw1")
    assert 0 < block["kept_tiles"] <= 1 and 0 < block["test_accuracy"] <= 1
    mod.main(["--quick", "--out", str(tmp_path)])  # everything done: nothing appended
    assert path.read_text().splitlines() == lines


def test_sparsify_quant_random_edges_keeps_the_asked_fraction(cora):
    from codesign.hwmodel import presets
    mod = load("sparsify_quant")
    _, r = mod.run_one(cora, "random_edges_0.5", 0, presets.get("h100"), epochs=2)
    assert abs(r["densities"]["edge"] - 0.5) < 1e-3
