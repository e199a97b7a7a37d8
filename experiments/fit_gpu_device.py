"""Fit the `h200` preset on the device-timed H200 grid and NVML energies (issue 39), and check it.

    python experiments/fit_gpu_device.py            # fit, check, write codesign/hwmodel/fits/h200.json
    python experiments/fit_gpu_device.py --no-save  # report only

Input: ``results/gpu/h200/gpu_calibration.json`` (`experiments/gpu_calibrate.py` on a lent H200)
and the R-MAT 2^20 kernel table of the same session (``results/gpu/h200/kernel_bench_csr*.log``).

**Latency.** Each timed point's `codesign.hwmodel` stages are rebuilt here (R-MAT graphs are
regenerated: `rmat_edges` is deterministic; gather locality measured on each graph): ``copy`` and
the harness copy as `elementwise_stage`, ``gemm`` as `gemm_stage` (TF32 / bf16 / int8; the
``fp32`` points at ``Precision.HIGHEST`` run on the CUDA cores, which `gemm_stage` does not
price: reported, never fitted), ``spmm`` as `segment_spmm_stages`, ``sddmm`` as
`tables.sddmm_stage`, ``pallas_csr`` as `csr_chunk_spmm_stages` (unweighted, its split rows).
**The harness** (`kernel_bench.device_loop`) is part of every measured call and is modeled, not
subtracted: one more pass over the call's first input (read + write), because XLA copies the
loop-carried input it bumps in place (inferred, not profiled: the 1 GiB ``copy`` point moves
2.2 TB/s counting its own read and write, and 4.4 TB/s counting that second pass, the device copy
rate this workplace measured with PyTorch, 4.3 TB/s; KINDS.md), and the loop's per-iteration cost,
which the fitted ``stage_overhead_s`` absorbs (the ``launch`` point: an 8-element kernel costs
8.9 us per iteration). The software factors `DEVICE_FACTORS` (matrix, DRAM and gather efficiency,
per-kernel cost, bf16 / TF32 rate ratio, overlap exponent, per-gathered-row cost, the gathers' L2
bandwidth) are fitted by `fit` (robust, log residuals, as `calibrate.fit`) and checked:

* random halves (10 splits): held-out MAPE, Spearman;
* leave one graph out (the grid's R-MAT scales) and leave one kind out (``pallas_csr``,
  ``sddmm``: never seen by the fit that predicts them);
* **out of the grid**: the R-MAT 2^20 kernel table (`kernel_bench.py`, another graph: seed 0,
  15.4M edges), segment_sum and the Pallas CSR kernel f32 / bf16 / int8, never fitted;
* the public H100 SpMM table (`tables.predict`, cuSPARSE column) with these factors on the
  `h100-datasheet` roofs: how far a device fit of XLA's kernels carries to another library.

**Energy.** Per NVML loop, energy = static power x time + Σ (per-field energy x count), linear in
the preset's energy fields. ``static_power_w`` is the idle reading at full clocks (right after a
loop), ``dram_energy_pj_per_byte`` is fitted on the ``copy`` loop, each precision's MAC energy on its
8192^3 GEMM loop (one loop each: identified, not validated), and the SpMM and SDDMM loops are
predicted out of sample (the issue's "modeled vs measured energy within 25 %"). The preset takes
these energies with the board's power cap as NVML read it (`shipped_spec`; `HardwareSpec.power_cap_w`).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import re
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from codesign import hwmodel  # noqa: E402
from codesign.data.synthetic import rmat_edges  # noqa: E402
from codesign.hwmodel import presets, tables  # noqa: E402
from codesign.hwmodel.calibrate import FIT_LOSS, FIT_SCALE, metrics  # noqa: E402
from codesign.results import write_json_atomic  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "gpu" / "h200"
BITS = {"tf32": 32.0, "fp32": 32.0, "float32": 32.0, "bfloat16": 16.0, "int8": 8.0}
SPLITS = 10
DEVICE_FACTORS = {  # name: (lower, upper, start); the bounds of the gather factors as `tables.TABLE_BOUNDS`
    "matrix_efficiency": (1e-3, 1.0, 0.5),
    "dram_efficiency": (1e-3, 1.0, 0.7),
    "gather_efficiency": (1e-4, 1.0, 0.3),
    "stage_overhead_s": (1e-7, 1e-3, 1e-5),
    "bf16_gemm_rate_ratio": (0.25, 4.0, 2.0),  # bf16 / TF32 tensor rate
    "overlap_exponent": (1.0, 64.0, 4.0),
    "row_gather_overhead_s": (1e-16, 1e-8, 1e-12),
    "onchip_bw_bytes_per_s": (1e11, 1e14, 5e12),
}
"""The factors the device fit adjusts (`HardwareSpec` fields, and the bf16 / TF32 GEMM rate ratio):
`calibrate.latency_model`'s GPU set plus the L2 bandwidth the gathers see (as the public-table fit,
`tables.TABLE_FACTORS`)."""


def spec_from(theta, base):
    """``base`` with the `DEVICE_FACTORS` values ``theta`` (a dict or a vector in their order)."""
    v = theta if isinstance(theta, dict) else dict(zip(DEVICE_FACTORS, theta))
    return dataclasses.replace(base, matrix_efficiency=v["matrix_efficiency"], dram_efficiency=v["dram_efficiency"],
                               gather_efficiency=v["gather_efficiency"], stage_overhead_s=v["stage_overhead_s"],
                               matrix_bf16_macs_per_s=base.matrix_fp32_macs_per_s * v["bf16_gemm_rate_ratio"],
                               overlap_exponent=v["overlap_exponent"],
                               row_gather_overhead_s=v["row_gather_overhead_s"],
                               onchip_bw_bytes_per_s=v["onchip_bw_bytes_per_s"])


def latency_model(stages, base):
    """A jitted ``theta -> latencies (s)`` of the points' ``stages`` (`DEVICE_FACTORS` order)."""
    import jax

    @jax.jit
    def f(theta):
        hw = spec_from(theta, base)
        return jnp.stack([sum(hwmodel.stage_cost(s, hw).latency_s for s in kernel) for kernel in stages])
    return f


def fit(f, measured, idx) -> np.ndarray:
    """Robust least squares on log(modeled / measured) over the points ``idx``, in log-parameters
    within the `DEVICE_FACTORS` bounds (`calibrate.FIT_LOSS` / `FIT_SCALE`, as the CPU fit)."""
    import scipy.optimize
    lo = np.log([b[0] for b in DEVICE_FACTORS.values()])
    hi = np.log([b[1] for b in DEVICE_FACTORS.values()])
    u0 = np.log([b[2] for b in DEVICE_FACTORS.values()])
    y = np.log(measured[idx])

    def resid(u):
        return np.log(np.asarray(f(jnp.asarray(np.exp(u), jnp.float32)))[idx]) - y
    res = scipy.optimize.least_squares(resid, x0=u0, bounds=(lo, hi), diff_step=1e-3, loss=FIT_LOSS, f_scale=FIT_SCALE)
    return np.exp(res.x)


def _graph(scale: int, draws: int, seed: int, _cache={}):
    key = (scale, draws, seed)
    if key not in _cache:
        s, r = rmat_edges(scale, draws, seed=seed)
        n = 1 << scale
        _cache[key] = (s, r, n, hwmodel.measure_locality(s, r, n))
    return _cache[key]


def _csr_stats(scale: int, draws: int, seed: int, _cache={}):
    """`work_item_stats` of the Pallas CSR plan of a graph (default `CsrBlockSizes`)."""
    key = (scale, draws, seed)
    if key not in _cache:
        from codesign.kernels import CooAdjacency
        from codesign.kernels.pallas_csr import csr_chunks, work_item_stats
        s, r, n, _ = _graph(*key)
        _cache[key] = work_item_stats(csr_chunks(CooAdjacency(jnp.asarray(s, jnp.int32), jnp.asarray(r, jnp.int32),
                                                              None, n)))
    return _cache[key]


def harness_stage(rows, width, bits):
    """The device loop's pass over the call's first input (read + write; see the module docstring)."""
    return hwmodel.elementwise_stage(rows, width, bits)


def point_stages(p: dict) -> tuple:
    """The modeled stages of one measured point, harness included."""
    kind = p["kind"]
    if kind in ("copy", "launch"):
        return (hwmodel.elementwise_stage(p["elements"], 1, 32.0), harness_stage(p["elements"], 1, 32.0))
    if kind == "gemm":
        b = BITS[p["dtype"]]
        return (hwmodel.gemm_stage(p["m"], p["k"], p["n"], b, b, 32.0 if b == 8.0 else b),
                harness_stage(p["m"], p["k"], b))
    if kind not in ("spmm", "sddmm", "pallas_csr"):
        raise ValueError(f"point kind {kind!r}: no stages (known: copy, launch, gemm, spmm, sddmm, pallas_csr)")
    draws, seed = p.get("draws"), p.get("seed")
    if draws is None:  # the calibration grid's graphs (gpu_calibrate.rmat_graph)
        draws, seed = p["degree"] * (1 << p["scale"]) // 2, p["scale"]
    s, r, n, loc = _graph(p["scale"], draws, seed)
    w, b = p["width"], BITS[p["dtype"]]
    if kind == "spmm":
        return (*hwmodel.segment_spmm_stages(n, s.size, w, b, b, loc), harness_stage(n, w, b))
    if kind == "sddmm":
        return (tables.sddmm_stage(n, s.size, w, b), harness_stage(n, w, b))
    st = _csr_stats(p["scale"], draws, seed)  # pallas_csr
    out_b = 32.0 if b == 8.0 else b
    stages = hwmodel.csr_chunk_spmm_stages(n, s.size, w, b, out_b, edge_values=False, node_scales=int(b == 8.0),
                                           split_rows=st["split_rows"], slots=st["slots"], locality=loc)
    return (*stages, harness_stage(n, w, b))


LOG_ROW = re.compile(r"rmat(\d+)\s+keep\s+[\d.]+\s+F=\s*(\d+)\s+(\S+)\s+fwd\s+([\d.]+) ms\s+fwd\+bwd\s+(\S+) ms")
BENCH_KINDS = {"segment": ("spmm", "float32"), "pallas_csr": ("pallas_csr", "float32"),
               "pallas_csr_bf16": ("pallas_csr", "bfloat16"), "pallas_csr_int8": ("pallas_csr", "int8")}


def bench_points(paths) -> list[dict]:
    """The forward rows of the R-MAT 2^20 kernel table (`kernel_bench.py` logs: its graph is
    ``rmat_edges(20, 8_000_000, seed=0)``) as points; cuSPARSE rows are not modeled (the preset's
    SpMM stages are XLA's and the Pallas kernel's). A later log's row replaces an earlier one."""
    rows = {}
    for path in paths:
        for m in LOG_ROW.finditer(Path(path).read_text()):
            scale, f, impl, fwd = int(m.group(1)), int(m.group(2)), m.group(3), float(m.group(4))
            if impl in BENCH_KINDS:
                kind, dt = BENCH_KINDS[impl]
                rows[(impl, f)] = {"kind": kind, "impl": impl, "scale": scale, "draws": 8_000_000, "seed": 0,
                                   "width": f, "dtype": dt, "time_s": fwd * 1e-3}
    return list(rows.values())


def base_spec():
    """`h200_datasheet` with ideal efficiencies and no per-kernel cost: what the fit starts from."""
    return presets.h200_datasheet().replace(matrix_efficiency=1.0, vector_efficiency=1.0, dram_efficiency=1.0,
                                            gather_efficiency=1.0, overlap_exponent=16.0, stage_overhead_s=0.0)


def fit_latency(points: list[dict], held: list[dict]) -> dict:
    base = base_spec()
    fitted_pts = [p for p in points if not (p["kind"] == "gemm" and p["dtype"] == "fp32")]
    cuda_core = [p for p in points if p["kind"] == "gemm" and p["dtype"] == "fp32"]
    stages = [point_stages(p) for p in fitted_pts]
    meas = np.asarray([p["time_s"] for p in fitted_pts])
    f = latency_model(stages, base)
    everything = np.arange(len(fitted_pts))
    theta = fit(f, meas, everything)
    pred_all = np.asarray(f(jnp.asarray(theta, jnp.float32)))
    splits = []
    for seed in range(SPLITS):
        o = np.random.default_rng(seed).permutation(len(fitted_pts))
        tr, te = np.sort(o[: len(o) // 2]), np.sort(o[len(o) // 2:])
        th = fit(f, meas, tr)
        splits.append(metrics(np.asarray(f(jnp.asarray(th, jnp.float32)))[te], meas[te]))
    groups = {}
    for name, key in (("leave_one_graph_out", lambda p: p.get("scale")), ("leave_one_kind_out", lambda p: p["kind"])):
        out = {}
        labels = [key(p) for p in fitted_pts]
        for g in sorted({v for v in labels if v is not None}, key=str):
            if name == "leave_one_kind_out" and g not in ("pallas_csr", "sddmm", "spmm"):
                continue
            te = np.asarray([i for i, v in enumerate(labels) if v == g])
            tr = np.asarray([i for i, v in enumerate(labels) if v != g])
            th = fit(f, meas, tr)
            out[str(g)] = metrics(np.asarray(f(jnp.asarray(th, jnp.float32)))[te], meas[te])
        groups[name] = out
    # out of the grid: the kernel table's rows, predicted by the fit on every grid point
    hs = [point_stages(p) for p in held]
    held_pred = np.asarray(latency_model(hs, base)(jnp.asarray(theta, jnp.float32)))
    held_meas = np.asarray([p["time_s"] for p in held])
    factors = dict(zip(DEVICE_FACTORS, map(float, theta)))
    # the shipped h100 preset (fitted on the public table) with the H200's memory, on the same points
    h100 = presets.get("h100").replace(dram_bw_bytes_per_s=4.8e12, onchip_buffer_bytes=presets.H200_L2_BYTES)
    as_h100 = np.asarray([sum(float(hwmodel.stage_cost(s, h100).latency_s) for s in st) for st in stages])
    hw = spec_from(factors, presets.h200_datasheet())
    by_kind = {}
    kinds = np.array([p["kind"] + "/" + p["dtype"] for p in fitted_pts])
    for k in dict.fromkeys(kinds.tolist()):
        by_kind[k] = metrics(pred_all[kinds == k], meas[kinds == k])
    return {
        "factors": factors,
        "preset_fields": spec_fields(hw),
        "in_sample": metrics(pred_all, meas), "in_sample_by_kind": by_kind,
        "h100_preset_with_h200_memory": metrics(as_h100, meas),
        "random_halves": {"splits": splits, "median_mape": float(np.median([s["mape"] for s in splits])),
                          "max_mape": float(np.max([s["mape"] for s in splits]))},
        "grouped": groups,
        "out_of_grid": {"rows": [{**{k: p[k] for k in ("impl", "width", "dtype")}, "measured_s": float(m),
                                  "modeled_s": float(q)} for p, m, q in zip(held, held_meas, held_pred)],
                        **metrics(held_pred, held_meas)},
        "cuda_core_fp32_gemm_not_modeled": [{k: p[k] for k in ("m", "k", "n", "time_s")} for p in cuda_core],
        "points": [{**{k: v for k, v in p.items() if k in ("kind", "m", "k", "n", "scale", "width", "elements",
                                                           "dtype")},
                    "measured_s": float(m), "modeled_s": float(q)} for p, m, q in zip(fitted_pts, meas, pred_all)],
    }


def spec_fields(hw) -> dict:
    return {k: float(getattr(hw, k)) for k in presets.H200_DEVICE_FIELDS}


ENERGY_FIELDS = ("static_power_w", "dram_energy_pj_per_byte", "sram_energy_pj_per_byte", "matrix_mac_energy_fp32_pj",
                 "mac_energy_bf16_pj", "mac_energy_int8_pj", "mac_energy_fp32_pj")


def energy_parts(stages, hw) -> dict:
    """The energy (J) of ``stages`` on ``hw`` per energy field, as the field's coefficient: DRAM and
    on-chip bytes (`stage_cost`'s ``dram_bytes`` / ``onchip_bytes``) x 1 pJ, and each stage's MACs
    under the MAC-energy field of its tier (`spec.mac_energy_pj`'s tiers at whole bit-widths:
    matrix stages at 32 bits on TF32, 16 bf16, 8 int8; other stages at 32 bits on the CUDA cores'
    fp32). The energy is linear in these fields."""
    from codesign.hwmodel.estimate import MATRIX_KINDS
    out = {k: 0.0 for k in ENERGY_FIELDS}
    for s in stages:
        c = hwmodel.stage_cost(s, hw)
        out["dram_energy_pj_per_byte"] += float(c.dram_bytes) * 1e-12
        out["sram_energy_pj_per_byte"] += float(c.onchip_bytes) * 1e-12
        bits, matrix = float(s.bits), s.kind in MATRIX_KINDS
        field = {8.0: "mac_energy_int8_pj", 16.0: "mac_energy_bf16_pj"}.get(
            bits, "matrix_mac_energy_fp32_pj" if matrix else "mac_energy_fp32_pj")
        out[field] += float(s.macs) * 1e-12
    return out


def shipped_spec(hw, energy_fields: dict):
    """The `h200` preset as shipped: ``hw`` (the fitted latency factors) with the NVML energies and
    the board's power cap (`presets.H200_ENERGY_FIELDS`: the on-chip SRAM energy stays the datasheet's)."""
    return hw.replace(**{k: energy_fields[k] for k in presets.H200_ENERGY_FIELDS})


def fit_energy(cal: dict, hw) -> dict:
    """Static power from the idle reading; DRAM pJ / byte from the copy loop; each GEMM precision's
    MAC energy from its loop; SpMM / SDDMM predicted (see the module docstring)."""
    en = cal["energy"]
    loops = en["loops"]
    static = float(en["idle"]["mean_power_w"])
    rows = []
    for lp in loops:
        p = lp["point"]
        # energy at the loop's own per-call time (clocks throttle under the 700 W limit)
        parts = energy_parts(point_stages(p), hw)
        rows.append({"point": p, "measured_j": lp["joules_per_call"], "seconds": lp["seconds_per_call"],
                     "mean_power_w": lp["mean_power_w"], "parts": parts,
                     "sm_clock_mhz": (lp.get("state_before") or {}).get("sm_clock_mhz")})
    fitted = {"static_power_w": static}

    def rest(r, skip):
        """Measured energy less the static energy over the loop's measured time and the fitted parts."""
        e = r["measured_j"] - static * r["seconds"]
        for k, v in fitted.items():
            if k not in ("static_power_w", skip):
                e -= v * r["parts"][k]
        return e
    copy = next(r for r in rows if r["point"]["kind"] == "copy")
    fitted["dram_energy_pj_per_byte"] = rest(copy, "dram_energy_pj_per_byte") / copy["parts"]["dram_energy_pj_per_byte"]
    # on-chip SRAM energy stays the preset's (Horowitz-scaled): no loop here separates it
    fitted["sram_energy_pj_per_byte"] = float(hw.sram_energy_pj_per_byte)
    field_of = {"tf32": "matrix_mac_energy_fp32_pj", "bfloat16": "mac_energy_bf16_pj", "int8": "mac_energy_int8_pj"}
    for r in rows:
        p = r["point"]
        if p["kind"] == "gemm" and p["dtype"] in field_of:
            k = field_of[p["dtype"]]
            fitted[k] = rest(r, k) / r["parts"][k]
    fp32 = next((r for r in rows if r["point"]["kind"] == "gemm" and r["point"].get("dtype") == "fp32"), None)
    if fp32 is not None:  # the CUDA-core fp32 MAC from the Precision.HIGHEST GEMM loop
        fitted["mac_energy_fp32_pj"] = rest(fp32, "matrix_mac_energy_fp32_pj") / fp32["parts"]["matrix_mac_energy_fp32_pj"]
    else:
        fitted["mac_energy_fp32_pj"] = float(hw.mac_energy_fp32_pj)
    out_rows = []
    ds = presets.h200_datasheet()
    for r in rows:
        if r["point"].get("dtype") == "fp32":  # CUDA-core FMAs: the vector fp32 MAC field
            r["parts"]["mac_energy_fp32_pj"] += r["parts"]["matrix_mac_energy_fp32_pj"]
            r["parts"]["matrix_mac_energy_fp32_pj"] = 0.0
        modeled = static * r["seconds"] + sum(fitted[k] * v for k, v in r["parts"].items() if k != "static_power_w")
        datasheet = ds.static_power_w * r["seconds"] + sum(float(getattr(ds, k)) * v for k, v in r["parts"].items()
                                                           if k != "static_power_w")
        role = "predicted" if r["point"]["kind"] in ("spmm", "sddmm") else "fitted"
        out_rows.append({"kind": r["point"]["kind"], "dtype": r["point"].get("dtype"), "role": role,
                         "measured_j": r["measured_j"], "modeled_j": float(modeled),
                         "ratio": float(modeled / r["measured_j"]), "datasheet_modeled_j": float(datasheet),
                         "datasheet_ratio": float(datasheet / r["measured_j"]), "seconds": r["seconds"],
                         "mean_power_w": r["mean_power_w"], "sm_clock_mhz": r["sm_clock_mhz"]})
    pred = [r for r in out_rows if r["role"] == "predicted"]
    from codesign.hwmodel.power import peak_power_parts, peak_power_w
    caps = {lp["state_before"].get("power_limit_w") for lp in loops if lp.get("state_before")}
    if len(caps) != 1 or None in caps:
        raise ValueError(f"NVML power limits of the energy loops: expected one, got {sorted(map(str, caps))}")
    fitted["power_cap_w"] = float(caps.pop())
    uncapped = ds.replace(**{k: v for k, v in fitted.items() if k not in ("sram_energy_pj_per_byte", "power_cap_w")})
    # the preset as shipped (latency factors, these energies, the cap): whole-model energy per loop,
    # its static energy over its own modeled latency
    shipped = shipped_spec(hw, fitted)
    for r, lp in zip(out_rows, loops):
        costs = [hwmodel.stage_cost(s, shipped) for s in point_stages(lp["point"])]
        lat = sum(float(c.latency_s) for c in costs)
        r["preset_modeled_j"] = sum(float(c.energy_j) for c in costs) + shipped.static_power_w * lat
        r["preset_modeled_s"] = lat
        r["preset_ratio"] = r["preset_modeled_j"] / r["measured_j"]
    return {"fields": fitted, "rows": out_rows,
            "peak_power_w_with_fitted_energies_uncapped": float(peak_power_parts(uncapped)["total"]),
            "peak_power_w_datasheet": float(peak_power_w(ds)),
            "predicted_max_abs_error": float(max(abs(r["ratio"] - 1) for r in pred)) if pred else None,
            "note": "energies at each loop's measured time: the GEMMs ran at the 700 W limit (SM clock 1410-1620 "
                    "MHz), the copy, SpMM, SDDMM and fp32 loops at 1980 MHz"}


def public_table_check(factors: dict, data_dir) -> dict:
    """The device-fitted software factors on the `h100-datasheet` roofs, against the public H100
    SpMM table's cuSPARSE column (no refit)."""
    try:
        table = tables.screen(tables.read_timing_table(Path(data_dir) / "h100_spmm_fp32.csv", "spmm"),
                              presets.h100_datasheet())
    except (FileNotFoundError, OSError) as e:
        return {"available": False, "error": str(e)}
    # every table row is one fp32 SpMM stage: the GEMM factors (matrix efficiency, bf16 rate) do not enter
    pred = np.asarray(tables.predict(table, spec_from(factors, presets.h100_datasheet())))
    meas = table.measured("cusparse")
    return {"available": True, "kernel": "cusparse", **metrics(pred, meas)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", default=str(RESULTS / "gpu_calibration.json"))
    ap.add_argument("--bench-logs", nargs="*", default=[str(RESULTS / "kernel_bench_csr.log"),
                                                        str(RESULTS / "kernel_bench_csr256.log")])
    ap.add_argument("--data", default=os.path.join(os.environ.get("CODESIGN_DATA", str(ROOT.parent / "shared" / "data")),
                                                   "gpu_timings"))
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    cal = json.loads(Path(args.calibration).read_text())
    points = [p for p in cal["points"] if p["kind"] != "launch"]
    held = bench_points(args.bench_logs)
    lat = fit_latency(points, held)
    hw = spec_from(lat["factors"], presets.h200_datasheet())
    energy = fit_energy(cal, hw)
    # the preset as shipped (these latency factors, the NVML energies, the 700 W cap) on the grid: the
    # cap lengthens the large GEMMs, which the grid timed in short loops (unthrottled or partly)
    shipped = shipped_spec(hw, energy["fields"])
    pts = [p for p in points if not (p["kind"] == "gemm" and p["dtype"] == "fp32")]
    pred = [sum(float(hwmodel.stage_cost(s, shipped).latency_s) for s in point_stages(p)) for p in pts]
    lat["as_shipped_in_sample"] = metrics(pred, [p["time_s"] for p in pts])
    rec = {"what": "the h200 preset fitted on device-timed kernels and NVML energy of a lent H200 "
                   "(codesign.hwmodel.presets.h200)",
           "device": cal["device"], "jax": cal["jax"], "measured_date": cal["date"],
           "fitted_date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "source": "results/gpu/h200/ (experiments/gpu_calibrate.py, experiments/kernel_bench.py)",
           "launch_point_s": next((p["time_s"] for p in cal["points"] if p["kind"] == "launch"), None),
           "latency": lat, "energy": energy,
           "public_h100_table": public_table_check(lat["factors"], args.data),
           "command": "python experiments/fit_gpu_device.py"}
    print(f"h100 preset (public-table fit) with H200 memory on the grid: MAPE "
          f"{lat['h100_preset_with_h200_memory']['mape']:.3f}")
    print(f"the preset as shipped (with the power cap) on the grid: MAPE {lat['as_shipped_in_sample']['mape']:.3f}")
    print(f"in-sample MAPE {lat['in_sample']['mape']:.3f}; random halves median {lat['random_halves']['median_mape']:.3f}"
          f" (max {lat['random_halves']['max_mape']:.3f}); out of grid {lat['out_of_grid']['mape']:.3f} "
          f"(n={lat['out_of_grid']['n']})")
    for name, g in lat["grouped"].items():
        print(name, {k: round(v["mape"], 3) for k, v in g.items()})
    for k, v in lat["in_sample_by_kind"].items():
        print(f"  {k:20s} MAPE {v['mape']:.3f} median ratio {v['median_ratio']:.3f}")
    for r in lat["out_of_grid"]["rows"]:
        print(f"  held {r['impl']:16s} F={r['width']:4d} measured {1e3 * r['measured_s']:8.3f} ms "
              f"modeled {1e3 * r['modeled_s']:8.3f} ms")
    print("factors", {k: float(f"{v:.4g}") for k, v in lat["factors"].items()})
    print("energy fields", {k: float(f"{v:.4g}") for k, v in energy["fields"].items()})
    for r in energy["rows"]:
        print(f"  energy {r['kind']:6s} {r['dtype']:9s} {r['role']:9s} measured {r['measured_j']:.4f} J "
              f"modeled {r['modeled_j']:.4f} J ratio {r['ratio']:.3f}; datasheet energies {r['datasheet_ratio']:.3f}")
    for r in energy["rows"]:
        print(f"  preset {r['kind']:6s} {r['dtype']:9s} modeled {r['preset_modeled_j']:.4f} J "
              f"({1e3 * r['preset_modeled_s']:.3f} ms) / measured {r['measured_j']:.4f} J "
              f"({1e3 * r['seconds']:.3f} ms): {r['preset_ratio']:.3f}")
    print(f"peak power: {energy['peak_power_w_with_fitted_energies_uncapped']:.0f} W with the NVML energies uncapped, "
          f"{energy['peak_power_w_datasheet']:.0f} W with the datasheet's (cap 700 W)")
    print("public H100 table (cuSPARSE)", rec["public_h100_table"])
    if not args.no_save:
        write_json_atomic(presets.FITS_DIR / "h200.json", rec)
    return rec


if __name__ == "__main__":
    main()
