"""Tests for the paper's machine-readable summary (`paper_figures.summary.build`, ``results/summary.json``)
and the front comparison behind it (`paper_figures.fronts.cost_dominates`), on hand-made records whose
numbers are checked by hand."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from paper_figures import fronts, summary  # noqa: E402

from codesign.experiment import versions  # noqa: E402
from codesign.results import config_key  # noqa: E402

DENSE_J, DENSE_MS = 100.0, 10.0


def _record(method, accs, energy_j, *, cw=0.0, keep=None, measured_ms=None, hw="h100"):
    """One record per seed: modeled energy ``energy_j`` (dense: `DENSE_J`), latency proportional."""
    out = []
    for seed, acc in enumerate(accs):
        config = {"experiment": "tradeoff", "dataset": "cora", "model": "gcn", "method": method, "hw": hw,
                  "cost_weight": cw, "budget": None, "keep": keep, "round": None, "seed": seed}
        rec = {"key": config_key(config), "config": config, "versions": versions(), "test_accuracy": acc,
               "val_accuracy": acc,
               "modeled": {"latency_s": energy_j * 1e-3, "energy_j": energy_j, "dram_bytes": 1.0},
               "dense_modeled": {"latency_s": DENSE_J * 1e-3, "energy_j": DENSE_J, "dram_bytes": 1.0}}
        if measured_ms is not None:
            rec["measured"] = {"latency_s": measured_ms * 1e-3}
            rec["dense_measured"] = {"latency_s": DENSE_MS * 1e-3}
        out.append(rec)
    return out


# dense accuracy 80.0 %; within 1 pt: >= 79.0; the dominance levels: >= 78.0
RECORDS = (
    _record("dense", (0.80, 0.80), DENSE_J, measured_ms=DENSE_MS)
    + _record("codesign", (0.80, 0.80), 8.0, cw=0.1, measured_ms=4.0)      # 80.0, 12.5x, 2.5x
    + _record("codesign", (0.80, 0.79), 5.0, cw=0.3, measured_ms=2.0)      # 79.5, 20x, 5x
    + _record("codesign", (0.78, 0.78), 2.0, cw=1.0, measured_ms=1.0)      # 78.0: not within 1 pt
    + _record("codesign", (0.60, 0.60), 1.0, cw=3.0)                       # collapsed
    + _record("codesign_v1", (0.81, 0.81), 50.0, cw=0.3)  # the joint method before issue 22
    + _record("int4", (0.80, 0.80), 10.0)                                               # 80.0, 10x, not measured
    + _record("a2q", (0.795, 0.795), 4.0, measured_ms=5.0)                             # 79.5, 25x, 2x
    + _record("random_edges", (0.70, 0.70), DENSE_J, keep=0.5)                          # nothing within 2 pt
)


@pytest.fixture()
def points(tmp_path):
    path = tmp_path / "cora_tradeoff.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return fronts.load_tradeoff(path)


def test_cost_dominates_hand_made():
    flag = [(8.0, 80.0), (5.0, 79.5), (2.0, 78.0)]
    # at level 80.0: baseline 10 vs flagship 8 -> 1.25
    assert fronts.cost_dominates(flag, [(10.0, 80.0)], 78.0) == (True, 1.25, 80.0)
    # at level 79.5: baseline 4 vs flagship 5 -> 0.8 (the baseline is cheaper there)
    assert fronts.cost_dominates(flag, [(4.0, 79.5)], 78.0) == (False, 0.8, 79.5)
    # a baseline level the flagship never reaches: margin 0
    assert fronts.cost_dominates(flag, [(50.0, 81.0)], 78.0) == (False, 0.0, 81.0)
    # below the compared range only: nothing to compare
    assert fronts.cost_dominates(flag, [(1.0, 70.0)], 78.0) == (True, None, None)
    # the worst of several levels; the baseline's cost at a level is its cheapest point at least that
    # accurate: 78.0 -> 2.5 / 2 = 1.25, 78.5 -> 2.5 / 5 = 0.5, 80.0 -> 9 / 8 = 1.125
    assert fronts.cost_dominates(flag, [(9.0, 80.0), (2.5, 78.5), (3.0, 78.0)], 78.0) == (False, 0.5, 78.5)
    with pytest.raises(ValueError, match="costs must be > 0"):
        fronts.cost_dominates([(0.0, 80.0)], [(1.0, 80.0)], 78.0)
    with pytest.raises(ValueError, match="min_acc is NaN"):
        fronts.cost_dominates(flag, [(1.0, 80.0)], math.nan)


def test_build_numbers_by_hand(points):
    s = summary.build(points)
    e = s["cora"]["gcn"]["h100"]
    assert e["dense_accuracy"] == pytest.approx(80.0)
    # the flagship: the largest energy reduction within 1 pt is cw 0.3 (79.5 %, 100 / 5); the largest
    # measured one within 1 pt is the same point (10 ms / 2 ms); cw 1 (50x, 10x) is 2 pt below dense
    assert e["codesign"] == pytest.approx({"modeled_energy_reduction": 20.0, "measured_latency_reduction": 5.0,
                                           "accuracy": 79.5, "energy_point_measured_latency_reduction": 5.0})
    assert e["int4"] == pytest.approx({"modeled_energy_reduction": 10.0, "accuracy": 80.0,
                                       "measured_latency_reduction": None,
                                       "energy_point_measured_latency_reduction": None})
    assert e["int4"]["measured_latency_reduction"] is None
    assert e["a2q"] == pytest.approx({"modeled_energy_reduction": 25.0, "measured_latency_reduction": 2.0,
                                      "accuracy": 79.5, "energy_point_measured_latency_reduction": 2.0})
    assert e["random_edges"] == {"modeled_energy_reduction": None, "measured_latency_reduction": None,
                                 "accuracy": None, "energy_point_measured_latency_reduction": None}
    # the joint method of issue 7, under its own name
    assert e["codesign_v1"] == pytest.approx({"modeled_energy_reduction": 2.0, "measured_latency_reduction": None,
                                              "accuracy": 81.0, "energy_point_measured_latency_reduction": None})
    for m in ("codesign", "codesign_v1", "int4", "a2q", "random_edges"):
        assert set(e[m]) == {"modeled_energy_reduction", "measured_latency_reduction", "accuracy",
                             "energy_point_measured_latency_reduction"}
    # the measured latency reduction of the energy point itself (the flagship's and A2Q's were timed)
    assert e["codesign"]["energy_point_measured_latency_reduction"] == pytest.approx(5.0)
    assert e["a2q"]["energy_point_measured_latency_reduction"] == pytest.approx(2.0)
    assert e["int4"]["energy_point_measured_latency_reduction"] is None
    dom = e["dominance"]
    assert set(dom) == {"int4", "a2q", "random_edges"}  # the baselines; not codesign_v1 (co-design family)
    assert dom["int4"]["modeled_energy"] == pytest.approx({"dominates": True, "worst_margin": 1.25,
                                                           "at_accuracy": 80.0})
    assert dom["int4"]["measured_latency"] is None  # int4 was not measured
    assert dom["a2q"]["modeled_energy"] == pytest.approx({"dominates": False, "worst_margin": 0.8,
                                                          "at_accuracy": 79.5})
    # measured: a2q 5 ms at 79.5 vs the flagship's 2 ms there -> 2.5
    assert dom["a2q"]["measured_latency"] == pytest.approx({"dominates": True, "worst_margin": 2.5,
                                                            "at_accuracy": 79.5})
    assert dom["random_edges"]["modeled_energy"] == {"dominates": True, "worst_margin": None, "at_accuracy": None}


def test_within_one_point_is_a_parameter(points):
    # allowing 2 points, the flagship's cw 1 (78.0 %: 50x energy, 10x measured) qualifies
    e = summary.build(points, loss_pts=2.0)["cora"]["gcn"]["h100"]
    assert e["codesign"] == pytest.approx({"modeled_energy_reduction": 50.0, "measured_latency_reduction": 10.0,
                                           "accuracy": 78.0, "energy_point_measured_latency_reduction": 10.0})
    with pytest.raises(ValueError, match="loss_pts"):
        summary.build(points, loss_pts=-1.0)


def test_paper_figures_writes_summary_json_and_tables(tmp_path):
    from paper_figures.all import main

    res = tmp_path / "results"
    res.mkdir()
    (res / "cora_tradeoff.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    assert main(["--results", str(res), "--out", str(tmp_path / "o"), "--dpi", "30"]) == 0
    s = json.loads((res / "summary.json").read_text())
    assert s["cora"]["gcn"]["h100"]["codesign"]["modeled_energy_reduction"] == pytest.approx(20.0)
    assert s["cora"]["gcn"]["h100"]["int4"]["measured_latency_reduction"] is None
    md = (res / "summary.md").read_text()
    assert "### Summary of cora / gcn / h100: dense 80.00 %" in md
    assert "| codesign | 20.00x | 79.50 | 5.00x | 5.00x |" in md
    assert "| int4 | 10.00x | 80.00 | – | – |" in md
    assert "| a2q | NO (worst 0.80x at 79.50 %) | yes (worst 2.50x at 79.50 %) |" in md


def test_bad_record_names_the_field(tmp_path):
    rec = _record("a2q", (0.8,), 4.0, measured_ms=5.0)[0]
    del rec["dense_measured"]
    path = tmp_path / "x_tradeoff.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    with pytest.raises(ValueError, match="dense_measured.latency_s"):
        fronts.load_tradeoff(path)


ABLATION_RECORDS = RECORDS + (
    _record("codesign_no_bits", (0.81, 0.81), 40.0, cw=0.3)       # 81.0 %, 2.5x: bits buy 8x at -1.5 pt
    + _record("codesign_no_bits", (0.80, 0.80), 25.0, cw=1.0)     # 80.0 %, 4x
    + _record("codesign_no_edges", (0.79, 0.80), 6.0, cw=0.3)     # 79.5 %, 16.67x
)


def test_ablation_rows_and_figure(tmp_path):
    from paper_figures import ablation

    path = tmp_path / "cora_tradeoff.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ABLATION_RECORDS))
    points = fronts.load_tradeoff(path)
    rows = ablation.rows(points)
    got = {(r["cost_weight"], r["method"]): r for r in rows}
    # the flagship first at each cost weight, then the ablations present there; codesign_v1 is not one
    assert [(r["cost_weight"], r["method"]) for r in rows] == [
        (0.1, "codesign"), (0.3, "codesign"), (0.3, "codesign_no_edges"), (0.3, "codesign_no_bits"),
        (1.0, "codesign"), (1.0, "codesign_no_bits"), (3.0, "codesign")]
    r = got[(0.3, "codesign_no_bits")]
    assert r["acc_pct"] == pytest.approx(81.0) and r["energy_reduction"] == pytest.approx(2.5)
    assert r["delta_acc_pts"] == pytest.approx(81.0 - 79.5) and r["energy_vs_flagship"] == pytest.approx(2.5 / 20.0)
    r = got[(0.3, "codesign_no_edges")]
    assert r["energy_reduction"] == pytest.approx(100 / 6) and r["acc_pct_std"] == pytest.approx(math.sqrt(0.5))
    assert got[(1.0, "codesign_no_bits")]["energy_vs_flagship"] == pytest.approx(4.0 / 50.0)
    written = ablation.draw(points, tmp_path / "o", "cora_tradeoff", dpi=30)
    assert [p.name for p in written] == ["cora_tradeoff_gcn_ablation.png", "cora_tradeoff_gcn_ablation.pdf"]
    assert all(p.stat().st_size > 1000 for p in written)
    # without an ablation method nothing is drawn
    assert ablation.rows([p for p in points if fronts.family(p["method"]) != "ablation"]) == []


def test_measured_fronts_figure_only_where_records_were_measured(tmp_path):
    from paper_figures import tradeoff
    from paper_figures.all import main

    res = tmp_path / "results"
    res.mkdir()
    (res / "cora_tradeoff.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ABLATION_RECORDS))
    out = tmp_path / "o"
    assert main(["--results", str(res), "--out", str(out), "--dpi", "30"]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"cora_tradeoff_gcn_measured.png", "cora_tradeoff_gcn_ablation.pdf"} <= names
    assert (out / "cora_tradeoff_gcn_measured.png").stat().st_size > 1000
    # the measured panel holds the measured points only: dense, codesign (3 of 4 levels) and a2q
    pts = fronts.load_tradeoff(res / "cora_tradeoff.jsonl")
    assert sorted(p["method"] for p in pts if p["measured_latency_ratio"] is not None) == [
        "a2q", "codesign", "codesign", "codesign", "dense"]
    assert tradeoff.draw([p for p in pts if p["method"] == "int4"], "measured", out, "none") == []


def test_a_file_of_mixed_cost_model_versions_is_refused_in_one_line(tmp_path):
    """Records priced by two versions of the cost model are never mixed on one front."""
    new = [dict(r, versions=versions()) for r in _record("dense", (0.80,), DENSE_J) + _record("int4", (0.8,), 10.0)]
    old = [dict(r, versions={**versions(), "cost_model": 1}) for r in _record("int8", (0.80,), 20.0)]
    path = tmp_path / "cora_tradeoff.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in new))
    assert {p["method"] for p in fronts.load_tradeoff(path)} == {"dense", "int4"}
    path.write_text("".join(json.dumps(r) + "\n" for r in new + old))
    with pytest.raises(ValueError) as err:
        fronts.load_tradeoff(path)
    assert str(err.value) == (f"{path}: records disagree on cost_model version: "
                              f"{versions()['cost_model']!r} vs 1")
    unversioned = [{k: v for k, v in r.items() if k != "versions"} for r in new]
    path.write_text("".join(json.dumps(r) + "\n" for r in unversioned))
    with pytest.raises(ValueError, match=r"cora_tradeoff.jsonl:1: record has no 'versions' \(priced before"):
        fronts.load_tradeoff(path)


def test_the_ceiling_beside_the_results_is_stated_under_each_title(tmp_path):
    path = tmp_path / "cora_tradeoff.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    md = summary.render([(path, fronts.load_tradeoff(path))])
    assert "No method can pass" not in md  # no reduction_bound.json beside the input
    bound = {"bounds": {"cora": {"gcn": {"h100": {"ceiling": 74.6}}, "gat": {"h100": {"ceiling": 33.7}}}}}
    (tmp_path / "reduction_bound.json").write_text(json.dumps(bound))
    md = summary.render([(path, fronts.load_tradeoff(path))])
    title = md.index("### Summary of cora / gcn / h100")
    assert md.index("No method can pass 74.6x modeled energy reduction here", title) < md.index("| method", title)
    assert "33.7x" not in md  # only panels that have results
