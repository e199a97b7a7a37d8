"""The `h200` preset's device fit (experiments/fit_gpu_device.py) on the committed H200 timings:
the record reproduces from results/gpu/h200/, the preset takes its latency fields, the kernel-table
log parser, the harness stage and the per-field energy split."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from codesign import hwmodel
from codesign.hwmodel import presets

ROOT = Path(__file__).resolve().parent.parent


def _load():
    spec = importlib.util.spec_from_file_location("fit_gpu_device", ROOT / "experiments" / "fit_gpu_device.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_log_rows_parsed_later_log_wins(tmp_path):
    fd = _load()
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("rmat20   keep 1.00 F=  64 segment     fwd     6.800 ms  fwd+bwd     8.506 ms    97.64 GB/s\n"
                 "rmat20   keep 1.00 F=  64 bcsr        fwd     1.221 ms  fwd+bwd     3.245 ms   543.96 GB/s\n"
                 "rmat20   keep 1.00 F= 256 pallas_csr_int8 fwd     1.682 ms  fwd+bwd       n/a ms   394.67 GB/s\n")
    b.write_text("rmat20   keep 1.00 F=  64 segment     fwd     7.000 ms  fwd+bwd     8.5 ms    1 GB/s\n")
    rows = {(r["impl"], r["width"]): r for r in fd.bench_points([a, b])}
    assert set(rows) == {("segment", 64), ("pallas_csr_int8", 256)}  # cuSPARSE rows are not modeled
    assert rows[("segment", 64)]["time_s"] == pytest.approx(7e-3)
    assert rows[("pallas_csr_int8", 256)]["kind"] == "pallas_csr" and rows[("pallas_csr_int8", 256)]["dtype"] == "int8"
    assert rows[("segment", 64)]["seed"] == 0 and rows[("segment", 64)]["draws"] == 8_000_000


def test_every_point_kind_has_stages_and_the_harness_pass():
    fd = _load()
    pts = [{"kind": "copy", "elements": 1024, "dtype": "float32"},
           {"kind": "gemm", "m": 64, "k": 32, "n": 16, "dtype": "bfloat16"},
           {"kind": "spmm", "scale": 8, "degree": 8, "width": 16, "dtype": "float32"},
           {"kind": "sddmm", "scale": 8, "degree": 8, "width": 16, "dtype": "float32"},
           {"kind": "pallas_csr", "scale": 8, "degree": 8, "width": 16, "dtype": "bfloat16"}]
    rows = {"copy": (1024, 1, 32), "gemm": (64, 32, 16), "spmm": (256, 16, 32), "sddmm": (256, 16, 32),
            "pallas_csr": (256, 16, 16)}
    for p in pts:
        st = fd.point_stages(p)
        n, w, b = rows[p["kind"]]
        assert st[-1].kind == "elementwise" and float(st[-1].compulsory_bytes) == 2 * n * w * b / 8
        assert len(st) >= 2
    with pytest.raises(ValueError, match="kind"):
        fd.point_stages({"kind": "conv"})


def test_energy_split_is_linear_in_the_energy_fields():
    """Σ field x coefficient (`energy_parts`) equals `stage_cost`'s dynamic energy on the datasheet preset."""
    fd = _load()
    hw = presets.h200_datasheet()
    for p in ({"kind": "gemm", "m": 512, "k": 256, "n": 64, "dtype": "int8"},
              {"kind": "spmm", "scale": 9, "degree": 8, "width": 32, "dtype": "float32"}):
        st = fd.point_stages(p)
        parts = fd.energy_parts(st, hw)
        want = sum(float(hwmodel.stage_cost(s, hw).energy_j) for s in st)
        got = sum(float(getattr(hw, k)) * v for k, v in parts.items() if k != "static_power_w")
        assert got == pytest.approx(want, rel=1e-4)


def test_h200_preset_takes_the_device_fit_and_states_its_evidence():
    rec = json.loads((presets.FITS_DIR / "h200.json").read_text())
    hw = presets.get("h200")
    for k in presets.H200_DEVICE_FIELDS:
        assert getattr(hw, k) == pytest.approx(rec["latency"]["preset_fields"][k])
    for k in presets.H200_ENERGY_FIELDS:  # NVML's, and the board's power cap
        assert getattr(hw, k) == pytest.approx(rec["energy"]["fields"][k])
    ds = presets.get("h200-datasheet")
    assert ds.dram_bw_bytes_per_s == 4.8e12 and hw.dram_bw_bytes_per_s == 4.8e12
    assert hw.power_cap_w == 700.0 and ds.power_cap_w is None
    ev = presets.evidence("h200")
    assert ev["level"] == "measured on the device" and ev["error"]["out_of_grid"]["n"] == 12
    assert 0 < ev["error"]["energy_predicted_max_abs_error"] < 1
    assert presets.evidence("h200-datasheet")["level"] == "datasheet only"


@pytest.mark.slow
def test_device_fit_reproduces_the_committed_record():
    """Refitting from results/gpu/h200/ gives the committed ``fits/h200.json`` (no timing: the fit is
    deterministic), and the record holds what the closing note quotes."""
    fd = _load()
    rec = fd.main(["--no-save"])
    old = json.loads((presets.FITS_DIR / "h200.json").read_text())
    # the factors the grid identifies (gather_efficiency is not: any value above ~0.2 predicts the same, the
    # gathers being bound by L2 and DRAM; JAX 0.11.2's fit lands at 0.57 with the same errors)
    for k in ("matrix_efficiency", "bf16_gemm_rate_ratio", "stage_overhead_s", "onchip_bw_bytes_per_s"):
        assert rec["latency"]["factors"][k] == pytest.approx(old["latency"]["factors"][k], rel=2e-2), k
    assert rec["latency"]["in_sample"]["mape"] == pytest.approx(old["latency"]["in_sample"]["mape"], abs=0.01)
    assert rec["latency"]["out_of_grid"]["mape"] == pytest.approx(old["latency"]["out_of_grid"]["mape"], abs=0.02)
    assert rec["latency"]["random_halves"]["median_mape"] == pytest.approx(
        old["latency"]["random_halves"]["median_mape"], abs=0.03)
    assert rec["energy"]["fields"] == pytest.approx(old["energy"]["fields"], rel=1e-3)
    pred = [r for r in rec["energy"]["rows"] if r["role"] == "predicted"]
    assert {r["kind"] for r in pred} == {"spmm", "sddmm"}
    assert np.all([r["datasheet_ratio"] < 1 for r in rec["energy"]["rows"]])  # the datasheet model under-charges


def test_recost_presets_reproduces_the_stored_target_and_prices_another(tmp_path):
    """Two stored Cora records trained for h100, re-priced on h100 (their stored reductions come
    back) and on h200."""
    spec = importlib.util.spec_from_file_location("recost_presets", ROOT / "experiments" / "recost_presets.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    picked = {}
    for line in (ROOT / "results" / "cora_tradeoff.jsonl").read_text().splitlines():
        r = json.loads(line)
        c = r.get("config") or {}
        if c.get("hw") == "h100" and c.get("model") == "gcn" and c.get("method") in ("int8", "dense") \
                and c.get("method") not in picked and "versions" in r:
            picked[c["method"]] = line
        if len(picked) == 2:
            break
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(picked.values()) + "\n")
    out = mod.main(["--dataset", "cora", "--records", str(path), "--to", "h100,h200", "--out", str(tmp_path / "o.json")])
    assert not out["dropped"] and len(out["runs"]) == 2
    for key, runs in out["runs"].items():
        stored = json.loads(picked[key.split(" / ")[0]])
        want = stored["dense_modeled"]["energy_j"] / stored["modeled"]["energy_j"]
        assert runs[0]["h100"]["energy_reduction"] == pytest.approx(want, rel=1e-3)
        assert runs[0]["h200"]["energy_reduction"] > 0


def test_h200_preset_refuses_a_bad_record_naming_the_field(tmp_path, monkeypatch):
    rec = json.loads((presets.FITS_DIR / "h200.json").read_text())
    rec["energy"]["fields"]["power_cap_w"] = float("nan")
    (tmp_path / "h200.json").write_text(json.dumps(rec))
    monkeypatch.setattr(presets, "FITS_DIR", tmp_path)
    with pytest.raises(ValueError, match=r"h200\.json: power_cap_w must be a finite number >= 0, got nan"):
        presets.get("h200")
