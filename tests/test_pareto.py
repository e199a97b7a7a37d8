"""Tests for paper_figures/pareto.py: the Pareto front and the figure script."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # make `paper_figures` importable however pytest is invoked
    sys.path.insert(0, str(ROOT))

from paper_figures.pareto import load_points, main, pareto_front  # noqa: E402

from codesign.results import ResultsStore, config_key  # noqa: E402


# --------------------------------------------------------------------------- pareto_front
def _dominates(cj, aj, ci, ai):
    return cj <= ci and aj >= ai and (cj < ci or aj > ai)


def test_front_simple():
    costs = [1.0, 2.0, 3.0, 4.0]
    accs = [0.5, 0.7, 0.6, 0.9]  # point 2 is dominated by point 1
    assert pareto_front(costs, accs).tolist() == [0, 1, 3]


def test_front_sorted_by_cost_regardless_of_input_order():
    costs = [4.0, 1.0, 3.0, 2.0]
    accs = [0.9, 0.5, 0.6, 0.7]
    assert pareto_front(costs, accs).tolist() == [1, 3, 0]


def test_front_ties():
    # same cost, different acc: only the better one survives
    assert pareto_front([1.0, 1.0], [0.5, 0.6]).tolist() == [1]
    # same acc, different cost: only the cheaper one survives
    assert pareto_front([1.0, 2.0], [0.6, 0.6]).tolist() == [0]
    # exact duplicates do not dominate each other: both are returned (by index)
    assert pareto_front([2.0, 1.0, 1.0], [0.9, 0.5, 0.5]).tolist() == [1, 2, 0]
    # a duplicate pair that is dominated is dropped entirely
    assert pareto_front([1.0, 2.0, 2.0], [0.9, 0.5, 0.5]).tolist() == [0]


def test_front_single_and_empty():
    assert pareto_front([3.0], [0.1]).tolist() == [0]
    out = pareto_front([], [])
    assert out.tolist() == [] and out.dtype.kind == "i"


def test_front_all_dominated_by_one():
    costs = np.array([0.5, 1.0, 2.0, 3.0])
    accs = np.array([0.95, 0.9, 0.8, 0.7])
    assert pareto_front(costs, accs).tolist() == [0]


def test_front_input_errors():
    with pytest.raises(ValueError, match="length"):
        pareto_front([1.0, 2.0], [0.5])
    with pytest.raises(ValueError, match="1-D"):
        pareto_front([[1.0]], [[0.5]])
    with pytest.raises(ValueError, match="NaN"):
        pareto_front([1.0, np.nan], [0.5, 0.6])


_values = st.one_of(
    st.integers(0, 5).map(float),  # small grid: many ties and duplicates
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_values, _values), max_size=30))
def test_front_property(pts):
    costs = np.array([p[0] for p in pts], dtype=float)
    accs = np.array([p[1] for p in pts], dtype=float)
    front = pareto_front(costs, accs)
    fset = set(front.tolist())
    assert len(fset) == len(front)
    assert np.all(np.diff(costs[front]) >= 0)  # sorted by cost
    for i in front:  # no returned point is dominated by any input point
        assert not any(_dominates(costs[j], accs[j], costs[i], accs[i]) for j in range(len(pts)))
    for i in range(len(pts)):  # every other point is dominated by a returned one
        if i not in fset:
            assert any(_dominates(costs[j], accs[j], costs[i], accs[i]) for j in front)


# --------------------------------------------------------------------------- figure script
def _record(cfg, acc, energy, latency=None, dense_energy=10.0):
    latency = energy / 100 if latency is None else latency
    return {
        "key": config_key(cfg),
        "config": cfg,
        "test_accuracy": acc,
        "val_accuracy": acc - 0.01,
        "modeled": {"latency_s": latency, "energy_j": energy, "dram_bytes": 1e6},
        "dense_modeled": {"latency_s": dense_energy / 100, "energy_j": dense_energy,
                          "dram_bytes": 4e6},
        "code_version": "test",
        "time": "2025-01-01T00:00:00",
    }


def _write_synthetic(path):
    base = {"dataset": "cora", "model": "gcn", "hw": "h100"}
    # (cost_weight, bits, energy, [acc per seed])
    groups = [
        (0.0, None, 10.0, [0.815, 0.805, 0.81]),  # dense FP32 reference
        (0.01, 8, 4.0, [0.81, 0.80, 0.805]),  # front
        (0.1, 8, 2.0, [0.79, 0.78, 0.80]),  # front
        (0.1, 4, 2.5, [0.70, 0.72, 0.71]),  # dominated by (0.1, 8)
        (1.0, 4, 0.5, [0.60, 0.62, 0.61]),  # front
    ]
    store = ResultsStore(path)
    for cw, bits, energy, accs in groups:
        for seed, acc in enumerate(accs):
            cfg = {**base, "cost_weight": cw, "seed": seed}
            if bits is not None:
                cfg["bits"] = bits
            store.append(_record(cfg, acc, energy * (1 + 0.01 * seed)))
    return groups


def test_load_points_groups_by_config_without_seed(tmp_path):
    path = tmp_path / "sweep.jsonl"
    _write_synthetic(path)
    # a record written twice (same key) must count once
    store = ResultsStore(path)
    store.append(store.records()[0])
    pts = load_points(path)
    assert len(pts) == 5
    assert all(p["n_seeds"] == 3 and p["seeds"] == [0, 1, 2] for p in pts)
    assert all("seed" not in p["config"] for p in pts)
    energies = [p["energy_j"] for p in pts]
    assert energies == sorted(energies)
    dense = next(p for p in pts if p["config"]["cost_weight"] == 0.0)
    assert dense["acc_mean"] == pytest.approx(0.81)
    assert dense["acc_std"] == pytest.approx(np.std([0.815, 0.805, 0.81], ddof=1))
    assert dense["energy_j"] == pytest.approx(10.0 * 1.01)
    assert dense["dense_energy_j"] == pytest.approx(10.0)
    assert dense["val_acc_mean"] == pytest.approx(0.80)


def test_load_points_missing_field(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"key": "k1", "config": {"seed": 0}, "test_accuracy": 0.5}) + "\n")
    with pytest.raises(ValueError, match="k1.*modeled.energy_j"):
        load_points(path)


def test_main_writes_figures_and_table(tmp_path, capsys):
    path = tmp_path / "sweep.jsonl"
    _write_synthetic(path)
    out = tmp_path / "figs"
    png, pdf = main([str(path), "--out", str(out)])
    assert png == out / "sweep_pareto.png" and pdf == out / "sweep_pareto.pdf"
    assert png.stat().st_size > 1000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert pdf.stat().st_size > 1000 and pdf.read_bytes()[:5] == b"%PDF-"
    text = capsys.readouterr().out
    assert "cora / gcn / h100" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and "cost weight" not in ln]
    # front in cost order: (1.0, 4b) -> (0.1, 8b) -> (0.01, 8b) -> dense (0.0)
    assert len(rows) == 4
    assert rows[0].startswith("| 1 | 4 | 61.00 ± 1.00 (n=3)")
    assert rows[1].startswith("| 0.1 | 8 | 79.00 ± 1.00 (n=3)")
    assert rows[2].startswith("| 0.01 | 8 | 80.50 ± 0.50 (n=3)")
    assert rows[3].startswith("| 0 | – | 81.00 ± 0.50 (n=3)")
    # energy reduction = dense_energy / energy; (1.0, 4b) has mean energy 0.5 * 1.01
    assert f"{10.0 / (0.5 * 1.01):.2f}x" in rows[0]
    assert "| 0.1 | 4 |" not in text  # the dominated point is not in the table
    assert "dense FP32 reference (group)" in text


def test_main_latency_axis_and_no_dense_group(tmp_path, capsys):
    path = tmp_path / "nodense.jsonl"
    store = ResultsStore(path)
    for cw, bits, e, acc in [(0.0, 8, 3.0, 0.8), (0.5, 4, 1.0, 0.7)]:
        store.append(_record({"dataset": "cora", "model": "gat", "hw": "h100",
                              "cost_weight": cw, "bits": bits, "seed": 0}, acc, e))
    png, pdf = main([str(path), "--out", str(tmp_path), "--x", "latency"])
    assert png.stat().st_size > 0 and pdf.stat().st_size > 0
    text = capsys.readouterr().out
    assert "latency (s)" in text and "speedup vs dense" in text
    assert "dense FP32 reference (dense_modeled)" in text
    assert "| 0.5 | 4 | 70.00 ± 0.00 (n=1)" in text


def test_main_missing_or_empty_file(tmp_path):
    with pytest.raises(SystemExit, match="not found"):
        main([str(tmp_path / "nope.jsonl"), "--out", str(tmp_path)])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(SystemExit, match="no records"):
        main([str(empty), "--out", str(tmp_path)])
    assert not list(tmp_path.glob("*.png"))


def test_masked_zero_weight_run_is_not_the_dense_reference():
    from paper_figures.pareto import dense_reference
    base = {"n_seeds": 3, "acc_std": 0.01, "energy_j": 1.0, "dense_energy_j": 2.0, "latency_s": 1.0,
            "dense_latency_s": 2.0}
    gated = {**base, "config": {"cost_weight": 0.0, "bits": 32, "edge_mask": True}, "acc_mean": 0.70}
    plain = {**base, "config": {"cost_weight": 0.0, "bits": 32, "edge_mask": None}, "acc_mean": 0.81}
    assert dense_reference([gated, plain])["acc_mean"] == 0.81
    only_gated = dense_reference([gated])
    assert only_gated["source"] == "dense_modeled" and only_gated["acc_mean"] is None
