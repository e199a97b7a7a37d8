"""Tests for the paper figure scripts (paper_figures/): front logic on hand-made points, every
script on small synthetic inputs (real cost breakdowns of a real GCN), the generated summary's
numbers, and errors on malformed input."""

from __future__ import annotations

import functools
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # make `paper_figures` importable however pytest is invoked
    sys.path.insert(0, str(ROOT))

from paper_figures import fronts  # noqa: E402

from codesign.experiment import versions  # noqa: E402
from codesign.results import ResultsStore, config_key  # noqa: E402

# --------------------------------------------------------------------------- synthetic inputs
# (method, cost_weight, densities, bits, test accuracies per seed). Dense accuracy: 80.5 %.
RUNS = [
    ("dense", 0.0, {"edge": 1.0, "feature": 1.0}, 32, (0.81, 0.80)),
    ("codesign", 0.01, {"edge": 0.8, "feature": 0.5}, 8, (0.81, 0.80)),
    ("codesign", 0.1, {"edge": 0.5, "feature": 0.2}, 4, (0.80, 0.79)),  # 79.5: within 1 pt
    ("codesign", 1.0, {"edge": 0.2, "feature": 0.1}, 4, (0.70, 0.72)),
    ("codesign", 10.0, {"edge": 0.05, "feature": 0.02}, 2, (0.13, 0.15)),  # collapsed: below the axis floor
    ("edge_only", 0.1, {"edge": 0.4, "feature": 1.0}, 32, (0.80, 0.80)),
    ("quant_only", 0.1, {"edge": 1.0, "feature": 1.0}, 4, (0.79, 0.80)),
    ("int8", 0.0, {"edge": 1.0, "feature": 1.0}, 8, (0.80, 0.81)),
    ("int4", 0.0, {"edge": 1.0, "feature": 1.0}, 4, (0.74, 0.76)),
    ("ugs_int8", 0.0, {"edge": 0.9, "feature": 1.0}, 8, (0.80, 0.80)),
    ("ugs_int8", 0.0, {"edge": 0.6, "feature": 1.0}, 8, (0.79, 0.78)),
    ("random_edges", 0.0, {"edge": 0.5, "feature": 1.0}, 32, (0.77, float("nan"))),
]
HWS = ("h100", "gnnear")


@functools.lru_cache(maxsize=None)
def _cost(hw: str, edge: float, feature: float, bits: int) -> tuple[dict, dict]:
    """(summary, breakdown) of a Cora-sized GCN on ``hw`` (cached: estimate is eager)."""
    from flax import nnx

    from codesign.hwmodel import estimate, presets

    spec = presets.get(hw)
    wl = _gcn().workload(2708, 10556, bits=bits, densities={"edge": edge, "feature": feature})
    report = estimate(wl, spec)
    del nnx
    return report.summary(), report.breakdown(spec)


@functools.lru_cache(maxsize=1)
def _gcn():
    from flax import nnx

    from codesign.models import GCN

    return GCN(1433, 16, 7, rngs=nnx.Rngs(0))


def synthetic_records(hws=HWS, runs=RUNS, dataset="cora", model="gcn") -> list[dict]:
    """Tradeoff records in the format of experiments/tradeoff.py (one per run and seed)."""
    records = []
    for hw in hws:
        dense_sum, dense_bd = _cost(hw, 1.0, 1.0, 32)
        for method, cw, dens, bits, accs in runs:
            summ, bd = _cost(hw, dens["edge"], dens["feature"], bits)
            for seed, acc in enumerate(accs):
                config = {"experiment": "tradeoff", "dataset": dataset, "model": model, "method": method,
                          "hw": hw, "cost_weight": cw, "budget": None, "seed": seed, "epochs": 10,
                          "edge_target": dens["edge"]}
                records.append({
                    "key": config_key(config), "config": config, "versions": versions(), "test_accuracy": acc,
                    "val_accuracy": acc - 0.01, "train_accuracy": 0.99,
                    "modeled": summ, "dense_modeled": dense_sum, "breakdown": bd, "dense_breakdown": dense_bd,
                    "densities": {**dens, "channel": 1.0},
                    "layer_bits": {"x0": bits, "w0": bits, "x1": bits, "w1": bits},
                    "code_version": "test", "time": "2026-01-01T00:00:00"})
    return records


def write_jsonl(path: Path, records) -> Path:
    store = ResultsStore(path)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert len(store.records()) == len(records)
    return path


@pytest.fixture(scope="module")
def tradeoff_file(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("res") / "cora_tradeoff.jsonl", synthetic_records())


def _is_png(path: Path) -> bool:
    return path.stat().st_size > 1000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _is_pdf(path: Path) -> bool:
    return path.stat().st_size > 1000 and path.read_bytes()[:5] == b"%PDF-"


def _check_figures(paths, names):
    """``paths`` holds exactly ``<name>.png`` and ``.pdf`` for each name, all valid and non-empty."""
    assert sorted(p.name for p in paths) == sorted(f"{n}.{e}" for n in names for e in ("png", "pdf"))
    for p in paths:
        assert _is_png(p) if p.suffix == ".png" else _is_pdf(p), p


def _point(points, hw, method, cw=0.0):
    pts = [p for p in points if p["hw"] == hw and p["method"] == method and p["cost_weight"] == cw]
    assert len(pts) == 1
    return pts[0]


# --------------------------------------------------------------------------- front logic
def test_best_reduction_within_hand_made():
    pts = [(2.0, 80.2), (5.0, 79.6), (9.0, 79.4), (20.0, 60.0), (30.0, float("nan"))]
    assert fronts.best_reduction_within(pts, 80.5) == (1, 5.0)  # 79.4 is 1.1 pt below
    assert fronts.best_reduction_within(pts, 80.5, loss_pts=1.2) == (2, 9.0)
    assert fronts.best_reduction_within(pts, 80.5, loss_pts=0.0) is None
    assert fronts.best_reduction_within(pts, 90.0) is None
    assert fronts.best_reduction_within([], 80.0) is None
    # equal reductions: the more accurate wins
    assert fronts.best_reduction_within([(5.0, 79.6), (5.0, 80.0)], 80.5) == (1, 5.0)
    # exactly 1 pt below counts despite float rounding (81.3 - 1 = 80.29999999999998)
    assert fronts.best_reduction_within([(3.0, 80.3)], 81.3) == (0, 3.0)
    with pytest.raises(ValueError, match="loss_pts"):
        fronts.best_reduction_within(pts, 80.0, loss_pts=-1.0)


# --------------------------------------------------------------------------- loading
def test_load_tradeoff_groups_seeds(tradeoff_file):
    points = fronts.load_tradeoff(tradeoff_file)
    assert len(points) == len(RUNS) * len(HWS)
    p = _point(points, "h100", "codesign", 0.1)
    assert p["n_seeds"] == 2 and p["seeds"] == [0, 1] and p["family"] == "codesign"
    assert p["acc_pct"] == pytest.approx(79.5)
    assert p["acc_pct_std"] == pytest.approx(np.std([80.0, 79.0], ddof=1))
    summ, bd = _cost("h100", 0.5, 0.2, 4)
    dense, _ = _cost("h100", 1.0, 1.0, 32)
    assert p["energy_ratio"] == pytest.approx(summ["energy_j"] / dense["energy_j"])
    assert p["latency_ratio"] == pytest.approx(summ["latency_s"] / dense["latency_s"])
    assert p["breakdown"]["layer0/gemm"]["energy_j"] == pytest.approx(bd["layer0/gemm"]["energy_j"])
    assert math.isnan(_point(points, "h100", "random_edges")["acc_pct"])  # one seed diverged
    assert _point(points, "h100", "int8")["family"] == "baseline"
    assert fronts.dense_point([q for q in points if q["hw"] == "gnnear"])["method"] == "dense"


def test_load_tradeoff_counts_a_repeated_record_once(tmp_path):
    recs = synthetic_records(hws=("h100",), runs=RUNS[:2])
    path = write_jsonl(tmp_path / "t.jsonl", recs + [recs[1]])
    p = [q for q in fronts.load_tradeoff(path) if q["method"] == "dense"][0]
    assert p["n_seeds"] == 2


def _malformed(tmp_path, mutate, line=2):
    recs = synthetic_records(hws=("h100",), runs=RUNS[:2])
    recs = [json.loads(json.dumps(r)) for r in recs]
    mutate(recs[line - 1])
    return write_jsonl(tmp_path / "bad.jsonl", recs)


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r.pop("test_accuracy"), "no field 'test_accuracy'"),
    (lambda r: r.update(test_accuracy=81.0), "fraction in \\[0, 1\\]"),
    (lambda r: r["modeled"].update(energy_j="lots"), "'modeled.energy_j' must be a number"),
    (lambda r: r.pop("dense_modeled"), "no 'dense_modeled' object"),
    (lambda r: r["config"].pop("method"), "'config.method' must be a non-empty string"),
    (lambda r: r["breakdown"]["layer0/spmm"].pop("dram_j"), "'breakdown.layer0/spmm.dram_j'"),
    (lambda r: r["breakdown"]["layer1/gemm"].update(on_nmp=1), "on_nmp' must be true or false"),
])
def test_malformed_record_names_file_and_line(tmp_path, mutate, message):
    path = _malformed(tmp_path, mutate, line=3)
    with pytest.raises(ValueError, match=f"bad.jsonl:3: .*{message}"):
        fronts.load_tradeoff(path)
    from paper_figures import tradeoff

    with pytest.raises(SystemExit, match=f"tradeoff.py: .*bad.jsonl:3: .*{message}"):
        tradeoff.main([str(path), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_garbled_line_and_missing_file(tmp_path):
    path = tmp_path / "g.jsonl"
    good = json.dumps(synthetic_records(hws=("h100",), runs=RUNS[:1])[0])
    path.write_text(good + "\n{not json\n" + good + "\n")
    with pytest.raises(ValueError, match="g.jsonl: line 2"):
        fronts.load_tradeoff(path)
    from paper_figures import breakdown, summary

    with pytest.raises(SystemExit, match="not found"):
        breakdown.main([str(tmp_path / "nope.jsonl"), "--out", str(tmp_path)])
    (tmp_path / "empty_tradeoff.jsonl").write_text("")
    with pytest.raises(SystemExit, match="no records"):
        summary.main([str(tmp_path / "empty_tradeoff.jsonl"), "--md", str(tmp_path / "s.md")])
    assert not (tmp_path / "s.md").exists()


def test_representatives_pick(tradeoff_file):
    pts = [p for p in fronts.load_tradeoff(tradeoff_file) if p["hw"] == "h100"]
    reps = fronts.representatives(pts)
    assert reps["dense"]["method"] == "dense"
    assert reps["int8"]["method"] == "int8"
    # largest energy reduction within 1 pt of the dense validation accuracy (79.5 %): λ=0.1 (78.5 %), not λ=1 (70 %)
    assert (reps["codesign"]["method"], reps["codesign"]["cost_weight"]) == ("codesign", 0.1)
    ugs = [p for p in pts if p["method"] == "ugs_int8"]
    target = math.log(reps["codesign"]["energy_ratio"])
    assert reps["ugs_int8"] is min(ugs, key=lambda p: abs(math.log(p["energy_ratio"]) - target))
    assert fronts.representatives([p for p in pts if p["method"] != "dense"])["codesign"] is None


def _selection_point(method, val, test, n, energy_ratio=1.0, cw=None):
    return {"method": method, "family": fronts.family(method), "val_acc_pct": val, "acc_pct": test,
            "n_seeds": n, "energy_ratio": energy_ratio, "latency_ratio": energy_ratio, "cost_weight": cw}


def test_reference_and_points_are_chosen_on_validation_not_test():
    dense = [_selection_point("dense", 80.0, 85.0, 5), _selection_point("dense", 81.0, 79.0, 5),
             _selection_point("dense", 90.0, 90.0, 2)]  # best on test / best on validation / too few seeds
    assert fronts.dense_point(dense) is dense[1]
    assert fronts.dense_point(dense[2:]) is dense[2]  # no candidate with 5 seeds: the most seeded
    cod = [_selection_point("codesign", 80.2, 70.0, 5, 0.1, 1.0),   # within 1 pt on validation, poor test
           _selection_point("codesign", 79.0, 84.0, 5, 0.05, 3.0),  # best test, 2 pt below on validation
           _selection_point("codesign", 81.0, 81.0, 4, 0.01, 10.0)]  # 4 seeds
    assert fronts.best_point_within(cod, 81.0) is cod[0]
    assert fronts.best_point_within(cod, 81.0, min_seeds=4) is cod[2]
    assert fronts.best_point_within(cod, 81.0, loss_pts=0.5) is None
    reps = fronts.representatives(dense + cod)
    assert reps["dense"] is dense[1] and reps["codesign"] is cod[0]
    with pytest.raises(ValueError, match="min_seeds"):
        fronts.dense_point(dense, 0)


# --------------------------------------------------------------------------- figure scripts
DPI = ["--dpi", "40"]


def test_tradeoff_breakdown_roofline_figures(tradeoff_file, tmp_path, capsys):
    from paper_figures import breakdown, roofline, tradeoff

    out = tmp_path / "fig"
    _check_figures(tradeoff.main([str(tradeoff_file), "--out", str(out), *DPI]),
                   ["cora_tradeoff_gcn_energy", "cora_tradeoff_gcn_latency"])
    _check_figures(breakdown.main([str(tradeoff_file), "--out", str(out), *DPI]), ["cora_tradeoff_gcn_breakdown"])
    _check_figures(roofline.main([str(tradeoff_file), "--out", str(out), *DPI]), ["cora_tradeoff_gcn_roofline"])
    assert "note" not in capsys.readouterr().out  # every bar and model was found


def test_breakdown_bars_split_the_energy(tradeoff_file):
    from paper_figures import breakdown

    pts = [p for p in fronts.load_tradeoff(tradeoff_file) if p["hw"] == "gnnear"]
    bars, notes = breakdown.bars(pts)
    assert [b["name"] for b in bars] == ["dense", "int8", "codesign", "ugs_int8"] and notes == []
    for b in bars:
        by_unit = sum(s[f] for s in b["breakdown"].values() for _, fields, _ in breakdown.UNIT_PARTS for f in fields)
        assert by_unit == pytest.approx(b["energy_j"], rel=1e-5)
    dense_sum, _ = _cost("gnnear", 1.0, 1.0, 32)
    assert bars[0]["energy_j"] == pytest.approx(dense_sum["energy_j"], rel=1e-5)
    # GNNear maps aggregation onto its near-memory units: that energy is in the near-memory part
    assert any(s["on_nmp"] and s["nmp_j"] > 0 for s in bars[0]["breakdown"].values())
    # with a 0-pt allowance the co-design bar is the λ=0.01 point (80.5 %, as dense)
    assert breakdown.bars(pts, loss_pts=0.0)[0][2]["point"]["cost_weight"] == 0.01
    # only an inaccurate co-design point and no INT8 / UGS runs: those bars are left out, with notes
    few = [p for p in pts if p["method"] == "dense" or (p["method"] == "codesign" and p["cost_weight"] == 1.0)]
    bars, notes = breakdown.bars(few)
    assert [b["name"] for b in bars] == ["dense"]
    assert notes == ["int8: no point", "codesign: no point within 1 pt of dense accuracy", "ugs_int8: no point"]


def test_roofline_points_and_roofs():
    from paper_figures import roofline

    from codesign.hwmodel import presets

    _, bd = _cost("gnnear", 1.0, 1.0, 32)
    pts = {p["stage"]: p for p in roofline.stage_points(bd)}
    g = bd["layer0/gemm"]
    assert pts["layer0/gemm"]["intensity_mac_per_byte"] == pytest.approx(g["macs"] / g["dram_bytes"])
    assert pts["layer0/gemm"]["rate_macs_per_s"] == pytest.approx(g["macs"] / g["latency_s"])
    s = bd["layer0/spmm"]
    assert s["on_nmp"] and pts["layer0/spmm"]["intensity_mac_per_byte"] == pytest.approx(s["macs"] / s["nmp_bytes"])
    h100 = {r["label"]: r for r in roofline.roofs(presets.get("h100"), bits=[32.0, 8.0])}
    assert h100["matrix fp32"]["peak_macs_per_s"] == pytest.approx(494.7e12 / 2)
    assert h100["matrix 8-bit"]["peak_macs_per_s"] == pytest.approx(1978.9e12 / 2)
    assert h100["vector 8-bit"]["peak_macs_per_s"] == pytest.approx(4 * 66.9e12 / 2)
    assert h100["matrix fp32"]["bw_bytes_per_s"] == pytest.approx(3.35e12 * presets.get("h100").dram_efficiency)
    nmp = [r for r in roofline.roofs(presets.get("gnnear")) if r["near_memory"]]
    # GNNear's artifact: 16 DIMM NMEs of 16 PEs x 8 lanes at 500 MHz, multiply and add issued apart; 2 ranks x 16 GB/s
    assert [r["peak_macs_per_s"] for r in nmp] == [pytest.approx(16 * 32e9)]
    assert nmp[0]["bw_bytes_per_s"] == pytest.approx(16 * 32e9)


def _validation_json(path: Path, quick_n=None) -> Path:
    rng = np.random.default_rng(0)
    points = []
    for i in range(quick_n or 12):
        measured = 10 ** rng.uniform(-4, -1)
        points.append({"kind": "gemm" if i % 2 else "spmm", "measured_s": measured,
                       "modeled_s": measured * (1.5 if i % 3 else 0.8), "split": "test" if i % 4 else "train"})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"held_out": {}, "points": points}))
    return path


def _kernel_json(path: Path) -> Path:
    rows = []
    for graph in ("cora", "rmat11"):
        for impl, t in (("segment", 2.0), ("bcsr", 1.0), ("pallas", 0.5)):
            rows.append({"graph": graph, "features": 64, "tile_keep": 1.0, "impl": impl,
                         "forward_ms": t, "forward_backward_ms": 2 * t})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"device": "cpu", "rows": rows}))
    return path


def test_validation_figure_and_metrics(tmp_path):
    from paper_figures import validation

    f = _validation_json(tmp_path / "hwmodel_validation_cpu.json")
    pts = validation.load_points(f)
    held = [p for p in pts if p["held_out"]]
    assert len(held) == 9
    m = validation.metrics([p["modeled_s"] for p in held], [p["measured_s"] for p in held])
    expected = np.mean([abs(p["modeled_s"] / p["measured_s"] - 1) for p in held])
    assert m["mape"] == pytest.approx(expected) and m["n"] == 9
    g = _validation_json(tmp_path / "gpu" / "hwmodel_validation.json")
    _check_figures(validation.main(["--results", str(tmp_path), "--out", str(tmp_path / "o"), *DPI]),
                   ["hwmodel_validation"])
    assert validation.find_inputs(tmp_path) == sorted([f, g])


def test_kernel_speedups(tmp_path):
    from paper_figures import kernels

    f = _kernel_json(tmp_path / "kernel_bench_cpu.json")
    s, notes = kernels.speedups(f)
    assert notes == []
    assert s[("cora", 64, 1.0)]["pallas"] == {"forward_ms": 4.0, "forward_backward_ms": 4.0}
    assert s[("rmat11", 64, 1.0)]["bcsr"]["forward_ms"] == 2.0
    _check_figures(kernels.main([str(f), "--out", str(tmp_path / "o"), *DPI]), ["kernel_speedups"])


def test_kernel_speedups_forward_only_rows(tmp_path):
    """A kernel without a backward (int8 features) has ``forward_backward_ms: null``: its forward
    speedup is kept and its forward + backward speedup is NaN, not an error."""
    from paper_figures import kernels

    f = _kernel_json(tmp_path / "kernel_bench_gpu.json")
    obj = json.loads(f.read_text())
    obj["rows"].append({"graph": "cora", "features": 64, "tile_keep": 1.0, "impl": "pallas_int8",
                        "forward_ms": 0.25, "forward_backward_ms": None})
    f.write_text(json.dumps(obj))
    s, _ = kernels.speedups(f)
    assert s[("cora", 64, 1.0)]["pallas_int8"]["forward_ms"] == 8.0
    assert np.isnan(s[("cora", 64, 1.0)]["pallas_int8"]["forward_backward_ms"])
    _check_figures(kernels.main([str(f), "--out", str(tmp_path / "o"), *DPI]), ["kernel_speedups"])


@pytest.mark.parametrize("which, mutate, message", [
    ("validation", lambda d: d["points"][3].pop("measured_s"), r"points\[3\]: field 'measured_s'"),
    ("validation", lambda d: d["points"][0].update(split="dev"), r"points\[0\]: field 'split'"),
    ("kernels", lambda d: d["rows"][2].update(forward_ms=-1.0), r"rows\[2\]: field 'forward_ms'"),
    ("kernels", lambda d: d.pop("rows"), "expected a non-empty 'rows' list"),
])
def test_malformed_json_inputs(tmp_path, which, mutate, message):
    from paper_figures import kernels, validation

    make, mod = (_validation_json, validation) if which == "validation" else (_kernel_json, kernels)
    f = make(tmp_path / f"{which}.json")
    d = json.loads(f.read_text())
    mutate(d)
    f.write_text(json.dumps(d))
    with pytest.raises(SystemExit, match=f"{which}.json: {message}"):
        mod.main([str(f), "--out", str(tmp_path / "o")])
    f.write_text('{"points": [\n  1,,\n]}')
    with pytest.raises(SystemExit, match=f"{which}.json:2: not valid JSON"):
        mod.main([str(f), "--out", str(tmp_path / "o")])


# --------------------------------------------------------------------------- summary
def test_summary_numbers(tradeoff_file, tmp_path):
    from paper_figures import summary

    md = summary.main([str(tradeoff_file), "--md", str(tmp_path / "summary.md")])
    text = md.read_text()
    points = fronts.load_tradeoff(tradeoff_file)
    h100 = text.split("\n## cora / gcn / h100")[1].split("\n## ")[0]
    assert "\n## cora / gcn / gnnear" in text and "(48 runs)" in text
    # the Pareto front (descriptive): validation and test accuracy beside each point's reductions
    best = _point(points, "h100", "codesign", 0.1)
    row = (f"| codesign | λ0.1, 10 epochs, edge 0.50, feature 0.20, bits 4 | {best['val_acc_pct']:.2f} | 79.50 ± 0.71 (n=2) | "
           f"{1 / best['energy_ratio']:.2f}x | {1 / best['latency_ratio']:.2f}x |")
    assert row in h100
    # the codesign front holds all four cost weights, cheapest first
    front_rows = [ln for ln in h100.splitlines() if ln.startswith("| codesign | λ")]
    assert [r.split("|")[2].strip().split(",")[0] for r in front_rows] == ["λ10", "λ1", "λ0.1", "λ0.01"]


def test_summary_over_too_few_seeds_says_so_per_point(tradeoff_file, tmp_path):
    """Two seeds a point: nothing is chosen, and every point is named with its n, never dropped silently."""
    from paper_figures import summary

    text = summary.main([str(tradeoff_file), "--md", str(tmp_path / "s.md")]).read_text()
    assert "### cora / gcn / h100: no dense reference with >= 5 seeds" in text
    few = text.split("### cora / gcn / h100: no dense reference")[1].split("###")[0]
    assert "Left out, fewer than 5 seeds: dense (10 epochs: n=2)" in few and "codesign (λ0.1, 10 epochs: n=2)" in few
    built = summary.build(fronts.load_tradeoff(tradeoff_file))["cora"]["gcn"]["h100"]
    assert built["reference"] is None and built["methods"] == {}
    assert {d["n"] for d in built["insufficient_seeds"]} == {2}
    assert {d["method"] for d in built["insufficient_seeds"]} >= {"dense", "codesign", "int4"}
    # at min_seeds 2 the same records give a reference chosen on validation
    assert summary.build(fronts.load_tradeoff(tradeoff_file), min_seeds=2)["cora"]["gcn"]["h100"]["reference"]["n"] == 2


# --------------------------------------------------------------------------- one command
def test_all_draws_what_exists_and_skips_the_rest(tradeoff_file, tmp_path, capsys):
    from paper_figures.all import main

    res = tmp_path / "results"
    res.mkdir()
    assert main(["--results", str(res), "--out", str(tmp_path / "o"), "--dpi", "30"]) == 0
    text = capsys.readouterr().out
    for what in ("tradeoff, breakdown, roofline, summary: no", "pareto: no", "measured: no", "validation: no",
                 "kernels: no"):
        assert f"skipped {what}" in text
    assert "0 file(s) written, 5 skipped, 0 failed" in text

    # a small tradeoff file (one hardware, three points): the figures' content is tested above
    write_jsonl(res / "cora_tradeoff.jsonl", synthetic_records(hws=("h100",), runs=RUNS[:3]))
    _kernel_json(res / "kernel_bench_cpu_quick.json")  # only a quick run: used, labelled quick
    _validation_json(res / "hwmodel_validation_cpu.json")
    _validation_json(res / "hwmodel_validation_cpu_quick.json", quick_n=4)
    out = tmp_path / "o"
    assert main(["--results", str(res), "--out", str(out), "--dpi", "30"]) == 0
    names = sorted(p.name for p in out.iterdir())
    stems = ["cora_tradeoff_gcn_energy", "cora_tradeoff_gcn_latency", "cora_tradeoff_gcn_breakdown",
             "cora_tradeoff_gcn_roofline", "hwmodel_validation", "kernel_speedups"]
    assert names == sorted(f"{s}.{e}" for s in stems for e in ("png", "pdf"))
    assert (res / "summary.md").read_text().startswith("# Accuracy vs modeled cost")
    assert "2 skipped, 0 failed" in capsys.readouterr().out  # pareto, measured: no sweep file


def test_all_quick_and_failures(tradeoff_file, tmp_path, capsys):
    from paper_figures.all import main

    res = tmp_path / "results"
    res.mkdir()
    recs = [json.loads(ln) for ln in tradeoff_file.read_text().splitlines()]
    del recs[4]["modeled"]
    write_jsonl(res / "cora_tradeoff.jsonl", recs)
    _validation_json(res / "gpu" / "hwmodel_validation.json")
    assert main(["--results", str(res), "--out", str(tmp_path / "o"), "--quick"]) == 1
    text = capsys.readouterr().out
    assert "FAILED cora_tradeoff.jsonl: load: " in text and "cora_tradeoff.jsonl:5: record has no 'modeled'" in text
    assert (tmp_path / "o" / "hwmodel_validation.png").exists()  # the rest still drawn
    assert not (res / "summary.md").exists()


def test_prefer_quick_or_full(tmp_path):
    from paper_figures.common import prefer_quick_or_full

    a, aq, bq = tmp_path / "a.json", tmp_path / "a_quick.json", tmp_path / "b_quick.json"
    assert prefer_quick_or_full([aq, a, bq], quick=False) == [a, bq]
    assert prefer_quick_or_full([aq, a, bq], quick=True) == [aq, bq]


def _measured_record(dataset, cw, acc, measured, dense_measured, modeled, dense_modeled, energy=(1.0, 1.0)):
    from codesign.experiment import make_record
    return make_record(f"{dataset}{cw}", {"dataset": dataset, "cost_weight": cw, "bits": 8 if cw else None},
                       {"test_accuracy": acc, "val_accuracy": acc, "speedup": dense_measured / measured,
                        "modeled": {"energy_j": energy[0]}, "dense_modeled": {"energy_j": energy[1]},
                        "densities": {}, "bits": 8 if cw else 32, "layer_bits": {},
                        "measured": {"latency_s": measured}, "dense_measured": {"latency_s": dense_measured},
                        "modeled_local": {"latency_s": modeled}, "dense_modeled_local": {"latency_s": dense_modeled}})


def test_measured_agreement_by_hand_and_figure(tmp_path):
    from paper_figures import measured
    recs = [_measured_record("cora", 0.0, 0.81, 2e-3, 2e-3, 1e-3, 1e-3),
            _measured_record("cora", 1.0, 0.80, 1e-3, 2.2e-3, 0.6e-3, 1e-3, energy=(0.5, 1.0)),
            _measured_record("cora", 3.0, 0.78, 0.5e-3, 1.8e-3, 0.4e-3, 1e-3, energy=(0.25, 1.0))]
    path = tmp_path / "cora_gcn_h100_measured.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    pts = measured.load_points(measured.find_inputs(tmp_path))
    assert [p["energy_reduction"] for p in pts] == [1.0, 2.0, 4.0]
    a = measured.agreement(pts)
    # programs: three compact (2, 1, 0.5 ms measured; 1, 0.6, 0.4 modeled) + the dense one once
    # (median of 2, 2.2, 1.8 = 2 ms measured; 1 ms modeled)
    want = np.mean([0.5, 0.4, 0.2, 0.5])
    assert a["n"] == 4 and a["mape"] == pytest.approx(want) and a["spearman"] == pytest.approx(1.0)  # same order: ties rank alike
    written = measured.draw(pts, tmp_path / "out", "cora", dpi=40)
    assert all(p.stat().st_size > 0 for p in written)
    bad = tmp_path / "bad" / "x_measured.jsonl"
    bad.parent.mkdir()
    rec = _measured_record("cora", 0.0, 0.5, 1e-3, 1e-3, 1e-3, 1e-3)
    del rec["dense_measured"]
    bad.write_text(json.dumps(rec) + "\n")
    with pytest.raises(ValueError, match=r"x_measured\.jsonl: record 'cora0.0' has no \['dense_measured'\]"):
        measured.load_points([bad])
    old = _measured_record("cora", 1.0, 0.5, 1e-3, 1e-3, 1e-3, 1e-3)
    old["versions"] = {**old["versions"], "cost_model": -1}
    new = _measured_record("cora", 0.0, 0.5, 1e-3, 1e-3, 1e-3, 1e-3)
    bad.write_text(json.dumps(new) + "\n" + json.dumps(old) + "\n")
    with pytest.raises(ValueError, match=r"x_measured\.jsonl: records disagree on cost_model version"):
        measured.load_points([bad])
