"""experiments/hwmodel_sensitivity.py on the main job's front: a tiny hand-made tradeoff file whose
chosen point, reductions, front and energy spread are recomputed here from the GCN model's own
workload (`codesign.models.GCN.workload`, not the script's `workload`) and a hand-built preset."""

import json
import pathlib

import numpy as np
import pytest

from codesign.experiment import versions
from codesign.hwmodel import estimate, measure_locality, presets
from codesign.hwmodel.spec import HOROWITZ_DRAM_PJ_PER_BYTE
from codesign.results import config_key
from experiment_modules import load

ROOT = pathlib.Path(__file__).resolve().parent.parent
BITS = ("x0", "w0", "x1", "w1")


hs = load("hwmodel_sensitivity")

# (edge, feature, channel, bits of every tensor)
DENSE = (1.0, 1.0, 1.0, 32.0)
A0, A1 = (0.3, 0.25, 0.5, 4.0), (0.32, 0.25, 0.5, 4.0)  # "codesign_int8 0.3", two seeds: few edges, more features
# "codesign_int8 1": every edge, fewer features and channels (its aggregation is the larger share); channels
# 0.125: each layer is mapped by energy (the records' objective), so only an aggregation-heavy design maps onto
# the NMEs, and only at LOW (B 140.4 -> 138.4 uJ against A's mean 139.7 uJ; at 0.25 channels B stays on the CAE)
B = (1.0, 0.103, 0.125, 4.0)
C = (0.3, 0.1, 0.5, 4.0)  # "int4": cheapest of all, but 1.75 points below dense
ACC = {"dense": (0.81, 0.815), "A": (0.80, 0.81), "B": (0.795, 0.825), "C": (0.79, 0.80)}  # B: one seed > 1 pt below
LOW = 0.3  # DDR4_RANK_INTERNAL_FRACTION's low end: rank-internal accesses cheaper, B's aggregation cheaper


def gnnear_at(fraction):
    """gnnear with rank-internal DDR4 access at ``fraction`` of an off-chip access, built here."""
    h = presets.get("gnnear")
    return h.replace(nmp=h.nmp.replace(internal_energy_pj_per_byte=HOROWITZ_DRAM_PJ_PER_BYTE * fraction))


def model_cost(hw, design, locality=None):
    """(energy_j, latency_s) of a design from the GCN model's workload (hard masks, ``bits`` override)."""
    from flax import nnx
    from codesign.models import GCN
    e, f, c, b = design
    # the model the design stands for: quantized below 32 bits, a channel mask where channels were removed
    model = GCN(1433, 16, 7, bits=int(b) if b < 32 else None, channel_mask=c < 1, rngs=nnx.Rngs(0))
    wl = model.workload(2708, 10556, hard=True, bits=b, locality=locality,
                        densities={"edge": e, "feature": f, "channel": c})
    r = estimate(wl, hw, mapping="energy_j")  # the records' objective
    return float(r.energy_j), float(r.latency_s)


def record(method, seed, acc, design, hw="gnnear", model="gcn", scale=1.0, bits_field=True, **level):
    """A tradeoff record (experiments/tradeoff.py's fields) storing the nominal cost of ``design``
    (energy x ``scale``); ``bits_field=False``: neither ``layer_bits`` nor ``bits``."""
    e, f, c, b = design
    cfg = {"experiment": "tradeoff", "dataset": "cora", "model": model, "method": method, "hw": hw,
           "cost_weight": 0.0, "budget": None, "keep": None, "round": None, "seed": seed, **level}
    h = presets.get(hw)
    (en, lat), (den, dlat) = model_cost(h, design), model_cost(h, DENSE)
    rec = {"key": config_key(cfg), "config": cfg, "test_accuracy": acc, "val_accuracy": acc,
           "densities": {"edge": e, "feature": f, "channel": c},
           "modeled": {"energy_j": en * scale, "latency_s": lat, "dram_bytes": 1.0},
           "dense_modeled": {"energy_j": den, "latency_s": dlat, "dram_bytes": 1.0}, "versions": versions()}
    if bits_field:
        rec["layer_bits"] = dict.fromkeys(BITS, b)
    return rec


@pytest.fixture(scope="module")
def records_file(tmp_path_factory):
    recs = [record("dense", s, a, DENSE) for s, a in enumerate(ACC["dense"])]
    recs += [record("codesign_int8", s, a, d, cost_weight=0.3) for s, (a, d) in enumerate(zip(ACC["A"], (A0, A1)))]
    recs += [record("codesign_int8", s, a, B, cost_weight=1.0) for s, a in enumerate(ACC["B"])]
    recs += [record("int4", 0, ACC["C"][0], C), record("int4", 1, ACC["C"][1], C, scale=1.02)]  # one stored 2 % off
    recs.append(record("dense", 0, 0.7, DENSE, model="gat"))  # not a GCN: not rebuilt
    recs.append(record("random_edges", 0, 0.8, (0.5, 1.0, 1.0, 32.0), bits_field=False, keep=0.5))  # no bits
    path = tmp_path_factory.mktemp("front") / "cora_tradeoff.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def _expected(hw):
    """Per point (dense, A, B, C): mean accuracy (%) and energy (mean over seeds); dense energy."""
    acc = {k: 100 * np.mean(v) for k, v in ACC.items()}
    energy = {"dense": model_cost(hw, DENSE)[0], "A": np.mean([model_cost(hw, d)[0] for d in (A0, A1)]),
              "B": model_cost(hw, B)[0], "C": model_cost(hw, C)[0]}
    return acc, energy


def _front(acc, ratio):
    """Points no other point matches in both cost (<=) and accuracy (>=), strictly better in one."""
    return {p for p in acc if not any(ratio[q] <= ratio[p] and acc[q] >= acc[p]
                                      and (ratio[q], acc[q]) != (ratio[p], acc[p]) for q in acc if q != p)}


LABEL = {"dense": "dense", "A": "codesign_int8 0.3", "B": "codesign_int8 1", "C": "int4"}


def test_front_chosen_point_and_flip_by_hand(records_file):
    out = hs.front_sensitivity(records_file, ["DDR4_RANK_INTERNAL_FRACTION"], locality=None)
    acc, e0 = _expected(presets.get("gnnear"))
    _, e1 = _expected(gnnear_at(LOW))
    # preconditions of the hand-made case: A beats B nominally, B beats A at the low end, C is cheapest
    assert e0["A"] < e0["B"] and e1["B"] < e1["A"], (e0, e1)
    assert e0["C"] < e0["A"] and e1["C"] < e1["B"]
    assert acc["A"] >= acc["dense"] - 1 and acc["B"] >= acc["dense"] - 1 > acc["C"]
    assert min(ACC["B"]) < np.mean(ACC["dense"]) - 0.01  # B qualifies on its mean, not on each seed

    assert out["skipped"] == {"model 'gat': workload() is the GCN's": 1,
                              "no bit-widths (neither layer_bits nor bits)": 1}
    assert out["targets_not_entered"] == []
    pan = out["panels"]["gnnear"]
    assert pan["n_points"] == 4 and pan["n_records"] == 8
    assert pan["check"]["energy_j"]["n_off"] == 1
    assert pan["check"]["energy_j"]["min"] == pytest.approx(1 / 1.02, rel=1e-5)
    assert pan["check"]["energy_j"]["max"] == pytest.approx(1.0, rel=1e-5)
    assert pan["check"]["latency_s"]["n_off"] == 0 and pan["check"]["dense_energy_j"]["n_off"] == 0

    rows = {r["end"]: r for r in out["rows"]}
    assert set(rows) == {"low", "high"} and rows["low"]["value"] == LOW
    low = rows["low"]
    assert low["chosen_nominal"]["label"] == "codesign_int8 0.3" and low["chosen"]["label"] == "codesign_int8 1"
    assert low["choice_changed"] is True
    assert low["chosen_nominal"]["reduction"] == pytest.approx(e0["dense"] / e0["A"], rel=1e-5)
    assert low["chosen"]["reduction"] == pytest.approx(e1["dense"] / e1["B"], rel=1e-5)
    assert low["nominal_choice_reduction"] == pytest.approx(e1["dense"] / e1["A"], rel=1e-5)
    assert low["chosen"]["acc_pct"] == pytest.approx(81.0)

    ratio0 = {k: e0[k] / e0["dense"] for k in e0}
    ratio1 = {k: e1[k] / e1["dense"] for k in e1}
    f0, f1 = _front(acc, ratio0), _front(acc, ratio1)
    assert f0 == {"dense", "A", "B", "C"} and f1 == {"dense", "B", "C"}  # A, costlier than B and less accurate, leaves
    assert low["front_nominal"] == 4 and low["front"] == 3 and low["front_changes"] == 1
    assert low["front_left"] == ["codesign_int8 0.3"] and low["front_entered"] == []
    ratios = sorted(e1[k] / e0[k] for k in e0)
    assert low["energy_ratio"]["min"] == pytest.approx(ratios[0], rel=1e-5)
    assert low["energy_ratio"]["median"] == pytest.approx((ratios[1] + ratios[2]) / 2, rel=1e-5)
    assert low["energy_ratio"]["max"] == pytest.approx(ratios[-1], rel=1e-5)
    red = sorted(ratio0[k] / ratio1[k] for k in ("A", "B", "C"))
    assert [low["reduction_ratio"][k] for k in ("min", "median", "max")] == pytest.approx(red, rel=1e-5)

    # the high end, by the same rule computed here
    high = rows["high"]
    _, e2 = _expected(gnnear_at(presets.ASSUMPTIONS["DDR4_RANK_INTERNAL_FRACTION"][1][1]))
    ok = [k for k in ("A", "B", "C") if acc[k] >= acc["dense"] - 1]
    best = max(ok, key=lambda k: e2["dense"] / e2[k])
    assert high["chosen"]["label"] == LABEL[best] and high["choice_changed"] == (best != "A")
    assert high["chosen"]["reduction"] == pytest.approx(e2["dense"] / e2[best], rel=1e-5)


def test_record_design_fields():
    rec = record("random_edges", 0, 0.8, (0.5, 1.0, 1.0, 32.0), bits_field=False, keep=0.5)
    rec["densities"] = {"edge": 0.5}
    assert hs.record_design(rec) == (None, "no bit-widths (neither layer_bits nor bits)")
    rec["bits"] = 32
    d, why = hs.record_design(rec)
    assert why is None and d == {"edge": 0.5, "feature": 1.0, "channel": 1.0, "bits": dict.fromkeys(BITS, 32.0)}
    rec["tiles"] = 12.0
    assert hs.record_design(rec)[1] == "kept BSR tiles (block-sparse kernel)"
    rec = record("codesign_int8", 0, 0.8, A0, cost_weight=0.3)
    rec["layer_bits"] = {"x0": 2.0, "w0": 8.0, "x1": 8.0, "w1": 6.0}
    assert hs.record_design(rec)[0]["bits"] == rec["layer_bits"]


def test_workload_matches_the_gcn_model(cora):
    """The script's rebuild = `GCN.workload` on Cora's measured locality; per-layer bits reach each layer."""
    loc = measure_locality(cora.senders, cora.receivers, cora.n_nodes)
    for hw in (presets.get("h100"), presets.get("gnnear")):
        for design in (DENSE, A0, (0.7, 0.4, 0.75, 8.0)):
            e, f, c, b = design
            r = estimate(hs.workload(e, f, b, channel_density=c, locality=loc), hw, mapping="energy_j")
            assert (float(r.energy_j), float(r.latency_s)) == pytest.approx(model_cost(hw, design, loc), rel=1e-6)
    hw = presets.get("h100")
    mixed = {"x0": 2.0, "w0": 8.0, "x1": 8.0, "w1": 8.0}
    mixed = estimate(hs.workload(0.7, 0.4, mixed, locality=loc), hw).breakdown(hw)
    int8 = estimate(hs.workload(0.7, 0.4, 8.0, locality=loc), hw).breakdown(hw)
    for k in int8:
        if k.startswith("layer1/"):
            assert mixed[k]["energy_j"] == pytest.approx(int8[k]["energy_j"], rel=1e-6)
    assert mixed["layer0/gemm"]["dram_bytes"] < int8["layer0/gemm"]["dram_bytes"]


def test_quick_front_writes_json(records_file, tmp_path, cora):
    """--quick: the two fixed points for two assumptions, and the front for the first two assumptions
    that enter the records' targets (gnnear here), written atomically with the rest."""
    out = tmp_path / "s.json"
    result = hs.main(["--quick", "--records", str(records_file), "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["front"] == json.loads(json.dumps(result["front"]))
    assert {(r["assumption"], r["end"]) for r in saved["front"]["rows"]} == {
        (a, e) for a in ("DDR4_RANK_INTERNAL_FRACTION", "GNNEAR_NME_NARROW_PACKING") for e in ("low", "high")}
    assert saved["front"]["panels"]["gnnear"]["n_points"] == 4


def test_the_front_coster_takes_the_cheaper_feature_store_as_the_records_do(cora):
    """With Cora's column nonzeros a design is priced dense or CSR, whichever costs less energy
    (the migrated records' pricing); without them, stored dense."""
    from codesign.graph import feature_column_nnz
    nnz = feature_column_nnz(cora.x)
    hw = presets.get("hygcn")
    design = {"edge": 0.5, "feature": 0.4, "channel": 1.0, "bits": dict.fromkeys(BITS, 8.0)}
    both, dense_only = hs._Coster(None, nnz)("n", hw, design), hs._Coster(None)("n", hw, design)
    csr = estimate(hs.workload(0.5, 0.4, 8.0, feature_nnz=nnz), hw, mapping="energy_j")
    assert both == (float(csr.energy_j), float(csr.latency_s)) and both[0] < dense_only[0]


def test_docs_tables_are_the_stored_result():
    """docs/hwmodel.md shows the sensitivity tables of results/hwmodel_sensitivity.json as
    `markdown` renders them (regenerated, not transcribed)."""
    stored = json.loads((ROOT / "results" / "hwmodel_sensitivity.json").read_text())
    md = hs.markdown(stored)
    assert md.count("\n| ") == len(stored["rows"]) + 1 + len(stored["front"]["rows"])  # rows + the second header
    docs = (ROOT / "docs" / "hwmodel.md").read_text()
    for table in md.split("\n\n"):  # the design points' table, then the front's (prose between them)
        assert table in docs, "docs/hwmodel.md: regenerate the sensitivity tables with hwmodel_sensitivity.markdown"
