"""Validate the analytic cost model against measured kernel times on this machine's CPU.

Measures XLA GEMM (`jnp.dot`) and XLA gather + `segment_sum` SpMM over a grid of sizes,
densities and dtypes (graphs: R-MAT at several scales and degrees, and Cora), builds the matching
`codesign.hwmodel` stages for every point (SpMM as `segment_spmm_stages`: XLA materializes the
gathered messages; locality measured on the graph), fits the `cpu` preset's five calibration factors (matrix, vector and DRAM efficiency, a
fixed per-stage overhead, and the bf16 GEMM rate relative to fp32, since XLA:CPU has no fast bf16
dot) on a random half of the points by least squares on log latency, and
reports the error on the other half: MAPE and Spearman rank correlation.

    python experiments/hwmodel_validation.py            # full grid, ~5 min on 2 cores
    python experiments/hwmodel_validation.py --quick    # small grid, CI smoke run

Writes ``results/hwmodel_validation_cpu.json`` (atomically): every point (config, measured
median, modeled before and after calibration), the fitted factors, the held-out metrics, the
machine, the JAX version and the date.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import sys

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize
import scipy.stats

from codesign import hwmodel
from codesign.bench import median_time_s
from codesign.data.synthetic import rmat_edges
from codesign.results import write_json_atomic

DTYPES = {"float32": (jnp.float32, 32.0), "bfloat16": (jnp.bfloat16, 16.0)}
FACTORS = ("matrix_efficiency", "vector_efficiency", "dram_efficiency", "stage_overhead_s", "bf16_gemm_rate_ratio")


def gemm_points(quick: bool):
    ms = (2708, 16384) if quick else (2708, 8192, 32768)
    ks = (64, 1433) if quick else (16, 64, 256, 1433)
    ns = (16, 128) if quick else (16, 64, 256)
    for m in ms:
        for k in ks:
            for n in ns:
                for dt in DTYPES:
                    yield {"kind": "gemm", "m": m, "k": k, "n": n, "dtype": dt}


def graphs(quick: bool, data_root):
    out = {}
    scales = ((11, 8),) if quick else ((12, 4), (12, 16), (14, 4), (14, 16), (16, 8))
    for scale, degree in scales:
        s, r = rmat_edges(scale, degree * (1 << scale) // 2, seed=scale)
        out[f"rmat{scale}_d{degree}"] = (s, r, 1 << scale)
    try:
        from codesign.data import load_planetoid
        g = load_planetoid("cora", root=data_root)
        out["cora"] = (np.asarray(g.senders), np.asarray(g.receivers), g.n_nodes)
    except (FileNotFoundError, RuntimeError) as e:  # offline without data: R-MAT only
        print(f"skipping cora: {e}", file=sys.stderr)
    return out


def spmm_points(quick: bool, graph_names):
    widths = (16, 64) if quick else (16, 64, 256)
    densities = (1.0,) if quick else (1.0, 0.5)
    for g in graph_names:
        for f in widths:
            for d in densities:
                for dt in DTYPES:
                    yield {"kind": "spmm", "graph": g, "width": f, "edge_density": d, "dtype": dt}


def measure_point(p, graph_data, reps: int, max_work: float):
    """Returns (measured seconds, the kernel's stages) or None if the point is above the work cap."""
    dtype, bits = DTYPES[p["dtype"]]
    key = jax.random.key(0)
    if p["kind"] == "gemm":
        a = jax.random.normal(key, (p["m"], p["k"]), dtype)
        b = jax.random.normal(key, (p["k"], p["n"]), dtype)
        t = median_time_s(jax.jit(jnp.dot), a, b, reps=reps)
        return t, (hwmodel.gemm_stage(p["m"], p["k"], p["n"], bits, bits, bits),)
    s, r, n = graph_data[p["graph"]]
    if p["edge_density"] < 1.0:
        keep = np.random.default_rng(1).random(s.size) < p["edge_density"]
        s, r = s[keep], r[keep]
    if s.size * p["width"] > max_work:
        return None
    x = jax.random.normal(key, (n, p["width"]), dtype)
    senders, receivers = jnp.asarray(s), jnp.asarray(r)
    fn = jax.jit(lambda x, s, r: jax.ops.segment_sum(x[s], r, num_segments=n))
    t = median_time_s(fn, x, senders, receivers, reps=reps)
    loc = hwmodel.measure_locality(s, r, n)
    return t, hwmodel.segment_spmm_stages(n, s.size, p["width"], bits, bits, loc)


def modeled(stages, base: hwmodel.HardwareSpec):
    """A jitted ``theta -> latencies`` for the calibration factors ``theta`` (see `FACTORS`)."""
    @jax.jit
    def f(theta):
        hw = dataclasses.replace(base, matrix_efficiency=theta[0], vector_efficiency=theta[1],
                                 dram_efficiency=theta[2], stage_overhead_s=theta[3],
                                 matrix_bf16_macs_per_s=base.matrix_fp32_macs_per_s * theta[4])
        return jnp.stack([sum(hwmodel.stage_cost(s, hw).latency_s for s in kernel) for kernel in stages])
    return f


def metrics(pred, meas) -> dict:
    pred, meas = np.asarray(pred), np.asarray(meas)
    return {"mape": float(np.mean(np.abs(pred - meas) / meas)),
            "spearman": float(scipy.stats.spearmanr(pred, meas).statistic), "n": int(meas.size)}


def fit(f, measured, train_idx):
    """Least squares on log(modeled / measured) over the training points, in log-parameters
    (efficiencies in [1e-5, 1], overhead in [1 ns, 1 ms], bf16/fp32 GEMM rate in [0.01, 4]); the model is evaluated in float32, so
    the finite-difference step is set explicitly (1e-3 in log space)."""
    y = np.log(measured[train_idx])

    def resid(u):
        return np.log(np.asarray(f(jnp.asarray(np.exp(u), jnp.float32)))[train_idx]) - y

    lo, hi = np.log([1e-5, 1e-5, 1e-5, 1e-9, 1e-2]), np.log([1.0, 1.0, 1.0, 1e-3, 4.0])
    x0 = np.log([0.5, 0.05, 0.5, 1e-5, 0.3])
    res = scipy.optimize.least_squares(resid, x0=x0, bounds=(lo, hi), diff_step=1e-3)
    return np.exp(res.x)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small grid (CI smoke run)")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--out", default=None, help="results JSON (default results/hwmodel_validation_cpu[_quick].json)")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--max-work", type=float, default=6e7, help="skip SpMM points with nnz x width above this")
    args = ap.parse_args(argv)
    reps = args.reps or (3 if args.quick else 7)
    out = args.out or f"results/hwmodel_validation_cpu{'_quick' if args.quick else ''}.json"

    graph_data = graphs(args.quick, args.data_root)
    points, measured, stages = [], [], []
    grid = list(gemm_points(args.quick)) + list(spmm_points(args.quick, graph_data))
    from tqdm import tqdm
    for p in tqdm(grid, desc="measure", unit="kernel"):
        res = measure_point(p, graph_data, reps, args.max_work)
        if res is None:
            continue
        points.append(p)
        measured.append(res[0])
        stages.append(res[1])
    measured = np.asarray(measured)
    base = hwmodel.presets.get("cpu").replace(matrix_efficiency=1.0, vector_efficiency=1.0, dram_efficiency=1.0,
                                              stage_overhead_s=0.0)
    f = modeled(stages, base)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(points))
    train_idx, test_idx = np.sort(order[: len(points) // 2]), np.sort(order[len(points) // 2:])
    before = np.asarray(f(jnp.asarray([1.0, 1.0, 1.0, 0.0, 1.0], jnp.float32)))
    theta = fit(f, measured, train_idx)
    after = np.asarray(f(jnp.asarray(theta, jnp.float32)))
    kinds = np.array([p["kind"] for p in points])
    result = {
        "what": "cost model (hwmodel cpu preset) vs measured XLA kernel times on this CPU",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "cpu_count": os.cpu_count(), "jax": jax.__version__, "backend": jax.default_backend()},
        "quick": args.quick, "reps": reps,
        "fitted": dict(zip(FACTORS, map(float, theta))),
        "held_out": metrics(after[test_idx], measured[test_idx]),
        "held_out_by_kind": {k: metrics(after[test_idx][kinds[test_idx] == k], measured[test_idx][kinds[test_idx] == k])
                             for k in ("gemm", "spmm")},
        "train": metrics(after[train_idx], measured[train_idx]),
        "uncalibrated_held_out": metrics(before[test_idx], measured[test_idx]),
        "points": [{**p, "measured_s": float(m), "modeled_s": float(a), "uncalibrated_s": float(b),
                    "split": "train" if i in set(train_idx.tolist()) else "test"}
                   for i, (p, m, a, b) in enumerate(zip(points, measured, after, before))],
    }
    write_json_atomic(out, result)
    h = result["held_out"]
    print(f"{len(points)} kernels; fitted {result['fitted']}")
    print(f"held-out: MAPE {100 * h['mape']:.1f} %, Spearman {h['spearman']:.3f} (n={h['n']}); "
          f"uncalibrated MAPE {100 * result['uncalibrated_held_out']['mape']:.1f} %")
    for k, m in result["held_out_by_kind"].items():
        print(f"  {k}: MAPE {100 * m['mape']:.1f} %, Spearman {m['spearman']:.3f} (n={m['n']})")
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
