"""Validate the analytic cost model against measured kernel times on this machine (CPU or GPU).

Measures XLA GEMM (`jnp.dot`) and XLA gather + `segment_sum` SpMM over a grid of sizes,
densities and dtypes, and on the CPU the kernels the deployed inference programs run
(`HOST_KINDS`: scipy CSR adjacency SpMM, CSR features @ W, numpy float32 GEMMs) (graphs: R-MAT at 7 scales and degrees from 2^10 to 2^18 nodes, Cora and
WordNet 3.0 (117,659 synsets, `codesign.data.load_wordnet`) when its files are present), builds the matching
`codesign.hwmodel` stages for every point as XLA runs them (SpMM as `segment_spmm_stages`: XLA
materializes the gathered messages, in f32 on the CPU; a bf16 GEMM on the CPU as
`upcast_gemm_stages`; locality measured on the graph), measures the CPU's roofs first (an XLA
f32 GEMM, a fused FMA chain and a streaming copy: `measure_peaks`; they replace the preset's
nominal rates, so the fit is about this machine), fits the preset's calibration factors on a
random half of the points by robust least squares on log latency (CPU: matrix, vector, gather
and DRAM efficiency, a fixed per-stage overhead, a fixed per-gathered-row overhead, a fixed
per-output-row overhead of CSR kernels (``row_overhead_s``, fitted where scipy's kernels are
timed) and the compute / memory overlap exponent; one set of factors for every kind: what
differs between kernels is in their stages; GPU: the bf16 / fp32 GEMM rate ratio in place of the vector
efficiency; CPU: also the effective cache, ``onchip_buffer_bytes``), and reports the error on the
other half, MAPE and Spearman rank correlation, and the MAPE spread over 9 more random halves.

The headline error is *grouped* cross-validation (``"grouped"`` in the results): leave one graph
out (every SpMM point of a graph predicted by a fit that never saw that graph), leave one width
out and leave one dtype out (per kernel kind), each with its pooled MAPE and Spearman, per kind,
per group and the worst group. The random split is secondary. The machine is shared: the grid is
timed in passes (the median kept), and the load average before each pass and each pass's MAPE from
the median are recorded, as is whether RAPL energy counters are readable (``"rapl"``).

    python experiments/hwmodel_validation.py            # full grid, 3 passes, ~3 min on 2 cores
    python experiments/hwmodel_validation.py --quick    # small grid, CI smoke run
    python experiments/hwmodel_validation.py --refit results/hwmodel_validation_cpu.json  # fit again, no timing
    python experiments/hwmodel_validation.py --save-preset   # and write codesign/hwmodel/fits/cpu.json
    python experiments/hwmodel_validation.py --peaks-only    # only this host's roofs into fits/cpu.json
    python experiments/hwmodel_validation.py --refit A.json --merge B.json  # pool the passes of two runs
    python experiments/hwmodel_validation.py --exclude-kinds gemm_numpy  # time and report a kind, never fit it

On a GPU (``jax.default_backend() == "gpu"``) the same script validates the ``h100`` preset
(``--hw``): larger GEMMs, R-MAT graphs up to 2^20 nodes, and the Pallas BSR SpMM kernel
(`codesign.kernels.bsr_spmm`, modeled as `bsr_spmm_stage` on the RCM-reordered 16 x 16 tiles)
beside XLA's segment_sum (the bf16 / fp32 GEMM rate ratio starts at the preset's 2).

Writes ``results/hwmodel_validation_<hw>.json`` (GPU: ``results/gpu/hwmodel_validation_<hw>.json``;
atomically): every point (config, measured median, modeled before and after calibration), the
fitted factors, the held-out metrics, the error of the preset as committed (its own factors, no
fit: on fresh timings, an out-of-sample check of the shipped model), the machine, the JAX version
and the date. ``--refit FILE``
rebuilds the stages of the points stored in FILE, fits again and rewrites the metrics (for
changes to the cost model; the measured times are kept).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from typing import Optional

# numpy / scipy's OpenBLAS on one thread before numpy loads: the `cpu_numpy` preset prices the deployed
# programs, which run so (experiments/realized_savings.py); recorded as ``machine.blas_threads``. Without it
# numpy's GEMMs here ran 1.9x faster than the deployed ones (2026-11-25: six runs at 0.53x the 1-thread median).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from codesign import hwmodel  # noqa: E402
from codesign.bench import MALLOC_ENV, reexec_with_malloc_env  # noqa: E402
from codesign.data.synthetic import rmat_edges  # noqa: E402
from codesign.results import write_json_atomic  # noqa: E402

from codesign.hwmodel.calibrate import (FACTORS, fit, grouped_validation, latency_model,  # noqa: E402
                                        machine, measure_roofs, metrics, rapl_status, save_cpu_fit, timed, with_roofs)

DTYPES = {"float32": (jnp.float32, 32.0), "bfloat16": (jnp.bfloat16, 16.0)}
# host_stage_overhead_s: the fixed cost of one numpy / scipy call in the deployed program (HOST_KINDS, priced on
# the `cpu_numpy` preset: one core, `HardwareSpec.single_core`), where stage_overhead_s is XLA's dispatch
# onchip_buffer_bytes is fitted on the CPU: the cache a kernel effectively has on a shared VM is not
# the L3 that lscpu reports (2026-11-25: 480 MiB "L3" of a whole socket shared with other tenants,
# 2 MiB L2 per core); the large graphs (WordNet, R-MAT 2^18) spill where the small ones do not.


def gemm_points(quick: bool, gpu: bool = False):
    if gpu:
        ms, ks, ns = (8192, 65536, 262144), (16, 64, 256, 1433), (16, 64, 256)
    else:
        ms = (2708, 16384) if quick else (2708, 8192, 32768)
        ks = (64, 1433) if quick else (16, 64, 256, 1433)
        ns = (16, 128) if quick else (16, 64, 256)
    for m in ms:
        for k in ks:
            for n in ns:
                for dt in DTYPES:
                    yield {"kind": "gemm", "m": m, "k": k, "n": n, "dtype": dt}


RMAT_SCALES = ((10, 8), (12, 4), (12, 16), (14, 4), (14, 16), (16, 8), (18, 4), (20, 4))  # (scale, mean degree)
"""The CPU grid's R-MAT graphs. 2^20 nodes (since 2026-11-28): its gathered matrix is 64-256 MiB at widths
16-64, beyond this host's 32 MiB L3, so that the gathers whose lines come from DRAM are priced from the grid
(`HardwareSpec.llc_bytes`, `line_miss_overhead_s`); before, the largest gathered matrix of a full graph was 64 MiB."""


def graphs(quick: bool, data_root, gpu: bool = False, with_wordnet: bool = True):
    out = {}
    if gpu:
        scales = ((14, 4), (14, 16), (16, 8), (18, 8), (20, 8))
    else:
        scales = ((11, 8),) if quick else RMAT_SCALES
    for scale, degree in scales:
        s, r = rmat_edges(scale, degree * (1 << scale) // 2, seed=scale)
        out[f"rmat{scale}_d{degree}"] = (s, r, 1 << scale)
    try:
        from codesign.data import load_planetoid
        g = load_planetoid("cora", root=data_root)
        out["cora"] = (np.asarray(g.senders), np.asarray(g.receivers), g.n_nodes)
    except (FileNotFoundError, RuntimeError) as e:  # offline without data: R-MAT only
        print(f"skipping cora: {e}", file=sys.stderr)
    if not quick and not gpu and with_wordnet:
        try:  # WordNet 3.0 (117,659 synsets, 367,578 symmetrized pointers): a real graph none of the R-MAT fit saw
            from codesign.data import load_wordnet
            g = load_wordnet(data_root, vocab_size=16)
            out["wordnet"] = (np.asarray(g.senders), np.asarray(g.receivers), g.n_nodes)
        except (FileNotFoundError, RuntimeError, OSError, ValueError) as e:
            print(f"skipping wordnet: {e}", file=sys.stderr)
    return out


HOST_KINDS = ("csr_scipy", "csr_features", "gemm_numpy")  # the deployed programs' kernels (numpy / scipy), float32
"""Kernels the deployed inference programs run (`codesign.deploy`), timed on the CPU beside XLA's:
``csr_scipy``: ``scipy.sparse.csr_matrix @ ndarray`` of the normalized, self-looped adjacency
(`codesign.deploy._normalized_csr`; modeled `hwmodel.spmm_stage`); ``csr_features``: a CSR
bag-of-words feature matrix (a random subset of its columns, as a learned feature mask keeps)
``@`` a dense W (`hwmodel.csr_gemm_stage`); ``gemm_numpy``: numpy's float32 ``a @ b`` (OpenBLAS;
`hwmodel.gemm_stage`). numpy / scipy have no bf16, so these are float32 only."""


def spmm_points(quick: bool, graph_names, kinds=("spmm",)):
    widths = (16, 64) if quick else (16, 64, 256)
    densities = (1.0,) if quick else (1.0, 0.5)
    for kind in kinds:
        for g in graph_names:
            for f in widths:
                for d in densities:
                    for dt in (("float32",) if kind in HOST_KINDS else DTYPES):
                        yield {"kind": kind, "graph": g, "width": f, "edge_density": d, "dtype": dt}


FEATURE_COLUMN_FRACTIONS = (1.0, 0.3, 0.1)  # kept feature columns (a learned feature mask's outcome)


def feature_data(quick: bool, data_root) -> dict:
    """The bag-of-words feature matrices as scipy CSR float32: Cora (1,433 columns) and, unless
    ``quick``, WordNet (2,000 columns), ``{name: csr}``; a dataset whose files are missing is
    skipped."""
    import scipy.sparse as sp
    from codesign.data import load_dataset
    out = {}
    for name in ("cora",) if quick else ("cora", "wordnet"):
        if data_root:
            os.environ.setdefault("CODESIGN_DATA", data_root)
        try:
            out[name] = sp.csr_matrix(np.asarray(load_dataset(name).x, np.float32))
        except (FileNotFoundError, RuntimeError, OSError, ValueError) as e:
            print(f"skipping {name} features: {e}", file=sys.stderr)
    return out


def _feature_subset(x, fraction: float, _cache={}):
    """``x`` (CSR) restricted to a random ``fraction`` of its columns (seeded by the fraction)."""
    key = (id(x), fraction)
    if key not in _cache:
        k = x.shape[1]
        cols = np.sort(np.random.default_rng(int(fraction * 1000)).permutation(k)[: max(1, round(fraction * k))])
        _cache[key] = x[:, cols].tocsr()
    return _cache[key]


def csr_feature_points(quick: bool, features: dict):
    """``csr_features`` points: each dataset's features (CSR) over `FEATURE_COLUMN_FRACTIONS` of
    its columns, times a dense W of each width; the subset's shape and nonzeros are stored in the
    point (``rows``, ``cols``, ``nnz``) so that ``--refit`` needs no data."""
    widths = (16, 64) if quick else (16, 64, 256)
    fractions = (1.0, 0.3) if quick else FEATURE_COLUMN_FRACTIONS
    for name, x in features.items():
        for c in fractions:
            xs = _feature_subset(x, c)
            for f in widths:
                yield {"kind": "csr_features", "graph": name, "rows": int(xs.shape[0]), "cols": int(xs.shape[1]),
                       "nnz": int(xs.nnz), "column_fraction": c, "width": f, "dtype": "float32"}


def numpy_gemm_points(quick: bool):
    """``gemm_numpy`` points: numpy float32 ``[m, k] @ [k, n]``, the deployed programs' dense
    products (tall-skinny: N rows of a graph times a narrow weight), ``m * k`` at most 4e7."""
    ms = (2708, 16384) if quick else (2708, 16384, 117659)
    ks = (16, 1433) if quick else (16, 64, 256, 1433)
    ns = (16, 64) if quick else (16, 45, 64, 256)
    for m in ms:
        for k in ks:
            for n in ns:
                if m * k <= 4e7:
                    yield {"kind": "gemm_numpy", "m": m, "k": k, "n": n, "dtype": "float32"}


def _edges(p, graph_data):
    s, r, n = graph_data[p["graph"]]
    if p["edge_density"] < 1.0:
        keep = np.random.default_rng(1).random(s.size) < p["edge_density"]
        s, r = s[keep], r[keep]
    return s, r, n


def point_stages(p, graph_data, gpu: bool = False, _cache={}):
    """The `codesign.hwmodel` stages of one grid point (locality measured on its graph; cached).
    On the CPU a bf16 GEMM is costed as XLA:CPU runs it: converts around an f32 GEMM
    (`hwmodel.upcast_gemm_stages`)."""
    bits = DTYPES[p["dtype"]][1]
    if p["kind"] == "gemm_numpy":
        return (hwmodel.gemm_stage(p["m"], p["k"], p["n"], bits, bits, bits),)
    if p["kind"] == "csr_features":
        return (hwmodel.csr_gemm_stage(p["rows"], p["cols"], p["width"], p["nnz"], bits, bits, bits),)
    if p["kind"] == "gemm":
        if bits < 32 and not gpu:
            return hwmodel.upcast_gemm_stages(p["m"], p["k"], p["n"], bits)
        return (hwmodel.gemm_stage(p["m"], p["k"], p["n"], bits, bits, bits),)
    key = (p["kind"], p["graph"], p["edge_density"])
    if key not in _cache:
        if p["kind"] == "spmm":
            s, r, n = _edges(p, graph_data)
            _cache[key] = (n, s.size, hwmodel.measure_locality(s, r, n))
        elif p["kind"] == "csr_scipy":  # the adjacency with self-loops, as the deployed program stores it
            s, r, n = _edges(p, graph_data)
            loops = np.arange(n, dtype=s.dtype)
            s, r = np.concatenate([s, loops]), np.concatenate([r, loops])
            _cache[key] = (n, s.size, hwmodel.measure_locality(s, r, n))
        else:  # Pallas BSR: tiles of the RCM-reordered graph; locality of the block-column stream
            bsr = _bsr_for(p, graph_data)
            _cache[key] = (bsr.n_pad, bsr.nnz_blocks, hwmodel.measure_locality(
                np.asarray(bsr.indices), np.asarray(bsr.row_of_tile), bsr.n_block_rows))
    n, nnz, loc = _cache[key]
    if p["kind"] == "spmm":  # XLA:CPU buffers 16-bit messages in f32 (segment_spmm_stages)
        return hwmodel.segment_spmm_stages(n, nnz, p["width"], bits, bits, loc, message_bits=None if gpu else 32.0)
    if p["kind"] == "csr_scipy":  # scipy's csr_matvecs: a loop over output rows (spmm_stage's output_rows)
        return (hwmodel.spmm_stage(n, nnz, p["width"], bits, bits, loc),)
    return (hwmodel.bsr_spmm_stage(n, nnz, BSR_BLOCK, p["width"], bits, bits, loc),)


BSR_BLOCK = 16
SPLIT_SEEDS = 9  # further random train / held-out halves fitted to report the spread of the error


def _bsr_for(p, graph_data, _cache={}):
    """The RCM-reordered ``BSR_BLOCK`` tiles of a point's graph at its edge density, built once;
    the two latest are kept (the grid alternates densities; the 2^20-node graph's tiles take
    about 9 GB)."""
    from codesign.kernels import BlockSparseAdjacency, CooAdjacency
    key = (p["graph"], p["edge_density"])
    if key not in _cache:
        while len(_cache) >= 2:
            _cache.pop(next(iter(_cache)))
        s, r, n = _edges(p, graph_data)
        adj = CooAdjacency(jnp.asarray(s, jnp.int32), jnp.asarray(r, jnp.int32), None, n)
        _cache[key] = BlockSparseAdjacency.from_coo(adj, BSR_BLOCK, reorder="rcm")
    return _cache[key]


def _timed_host(fn, *args, reps: int) -> float:
    """Median seconds of ``reps`` back-to-back calls of a numpy / scipy ``fn`` after ``reps``
    untimed ones (as `timed`: the first calls after a pause run slower)."""
    import time
    for _ in range(reps):
        fn(*args)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def _normalized_adjacency(p, graph_data, _cache={}):
    """``D^-1/2 (A + I) D^-1/2`` of a point's graph at its edge density as float32 scipy CSR
    (`codesign.deploy._normalized_csr`, what the deployed program multiplies); the latest kept."""
    key = (p["graph"], p["edge_density"])
    if key not in _cache:
        from codesign.deploy import _normalized_csr
        _cache.clear()
        s, r, n = _edges(p, graph_data)
        _cache[key] = _normalized_csr(s, r, np.ones(s.size, np.float32), n)
    return _cache[key]


def measure_point(p, graph_data, reps: int, max_work: float, features=None):
    """Returns the measured median seconds, or None if the point is above the work cap."""
    dtype, _ = DTYPES[p["dtype"]]
    key = jax.random.key(0)
    rng = np.random.default_rng(0)
    if p["kind"] == "gemm_numpy":
        a = rng.standard_normal((p["m"], p["k"]), np.float32)
        b = rng.standard_normal((p["k"], p["n"]), np.float32)
        return _timed_host(lambda a, b: a @ b, a, b, reps=reps)
    if p["kind"] == "csr_features":
        xs = _feature_subset(features[p["graph"]], p["column_fraction"])
        w = rng.standard_normal((xs.shape[1], p["width"]), np.float32)
        return _timed_host(lambda a, b: a @ b, xs, w, reps=reps)
    if p["kind"] == "gemm":
        a = jax.random.normal(key, (p["m"], p["k"]), dtype)
        b = jax.random.normal(key, (p["k"], p["n"]), dtype)
        return timed(jax.jit(jnp.dot), a, b, reps=reps)
    s, r, n = _edges(p, graph_data)
    if s.size * p["width"] > max_work:
        return None
    if p["kind"] == "csr_scipy":
        adj = _normalized_adjacency(p, graph_data)
        x = rng.standard_normal((n, p["width"]), np.float32)
        return _timed_host(lambda a, b: a @ b, adj, x, reps=reps)
    if p["kind"] == "spmm":
        x = jax.random.normal(key, (n, p["width"]), dtype)
        fn = jax.jit(lambda x, s, r: jax.ops.segment_sum(x[s], r, num_segments=n))
        return timed(fn, x, jnp.asarray(s), jnp.asarray(r), reps=reps)
    from codesign.kernels import bsr_spmm  # "pallas": the Pallas BSR kernel (GPU)
    bsr = _bsr_for(p, graph_data)
    x = jax.random.normal(key, (bsr.n_pad, p["width"]), dtype)
    return timed(jax.jit(lambda a, x: bsr_spmm(a, x)), bsr, x, reps=reps)


FIT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "codesign", "hwmodel", "fits", "cpu.json")


def merge_runs(first: dict, paths) -> dict:
    """``first`` (a result of this script) with the timed passes of the results in ``paths`` appended:
    same points in the same order and the same numpy BLAS thread count (``machine.blas_threads``: numpy's
    GEMMs run ~2x faster on two threads than on one; else ValueError naming the file), ``per_pass_s`` concatenated,
    ``load_average_per_pass`` concatenated, ``peaks`` the median over the files' roofs,
    ``date`` the first file's with ``merged_dates`` listing all."""
    import json
    keys = lambda r: [{k: v for k, v in q.items() if k not in ("measured_s", "modeled_s", "uncalibrated_s", "split")}
                      for q in r["points"]]
    runs = [first]
    for path in paths:
        with open(path) as fh:
            r = json.load(fh)
        if keys(r) != keys(first) or not r.get("per_pass_s"):
            raise ValueError(f"--merge {path}: not the same grid of points (or no per-pass timings) as the --refit file")
        threads = [(x.get("machine") or {}).get("blas_threads") for x in (first, r)]
        if threads[0] != threads[1]:
            raise ValueError(f"--merge {path}: timed with OPENBLAS_NUM_THREADS={threads[1]}, the --refit file with "
                             f"{threads[0]}: numpy GEMM timings of the two cannot be pooled")
        runs.append(r)
    out = dict(first)
    out["per_pass_s"] = [row for r in runs for row in r["per_pass_s"]]
    out["load_average_per_pass"] = [la for r in runs for la in (r.get("load_average_per_pass") or [None] * len(r["per_pass_s"]))]
    out["peaks"] = {k: float(np.median([r["peaks"][k] for r in runs])) for k in first["peaks"]}
    out["peaks_by_run"] = [r["peaks"] for r in runs]
    out["merged_dates"] = [r["date"] for r in runs]
    out["passes"] = len(out["per_pass_s"])
    return out


def peaks_only(args) -> dict:
    """Measures this host's roofs (`measure_peaks`, median of ``args.passes`` passes; seconds) and
    writes them into the `cpu` fit record with its fitted factors kept."""
    roofs = [measure_roofs(args.reps) for _ in range(args.passes)]
    peaks = {k: float(np.median([r[k] for r in roofs])) for k in roofs[0]}
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    old = hwmodel.presets.load_fit("cpu")
    rec = save_cpu_fit({"machine": machine(), "date": now, "fitted_date": now, "peaks": peaks}, FIT_PATH, old=old)
    print("measured roofs: " + ", ".join(f"{k} {v:.3g}" for k, v in peaks.items()))
    print(f"wrote {os.path.relpath(FIT_PATH)} (factors kept from the {old['fitted_date']} fit)")
    return rec


LOAD_PER_PASS: list = []  # os.getloadavg() (1, 5, 15 min) at the start of each timed pass: other tenants' load


def measure(args, gpu: bool, graph_data, features=None) -> tuple[list, np.ndarray, np.ndarray, Optional[dict]]:
    """Times the grid ``args.passes`` times in sequence (and, on the CPU, the roofs before each
    pass), so that a slow drift of a shared machine (this VM: two back-to-back passes differed by
    14 % MAPE, and its streaming bandwidth by 41 vs 69 GB/s) shows up as spread between passes
    instead of as a bias of one part of the grid.

    Returns:
      ``(points, measured [P] = median over passes, per_pass [passes, P], peaks)``; ``peaks`` is
      the median of each roof over passes (`measure_peaks`), None on a GPU.
    """
    kinds = ("spmm", "pallas") if gpu else ("spmm", "csr_scipy")
    grid = list(gemm_points(args.quick, gpu)) + list(spmm_points(args.quick, graph_data, kinds))
    if not gpu:  # the deployed programs' numpy / scipy kernels (HOST_KINDS)
        grid += list(csr_feature_points(args.quick, features or {})) + list(numpy_gemm_points(args.quick))
    from tqdm import tqdm
    runs, roofs = [], []
    for i in range(args.passes):
        LOAD_PER_PASS.append(list(os.getloadavg()) if hasattr(os, "getloadavg") else None)
        if not gpu:
            roofs.append(measure_roofs(args.reps))
        runs.append([measure_point(p, graph_data, args.reps, args.max_work, features)
                     for p in tqdm(grid, desc=f"measure pass {i + 1}/{args.passes}", unit="kernel")])
    keep = [j for j in range(len(grid)) if runs[0][j] is not None]
    per_pass = np.asarray([[run[j] for j in keep] for run in runs])
    peaks = {k: float(np.median([r[k] for r in roofs])) for k in roofs[0]} if roofs else None
    return [grid[j] for j in keep], np.median(per_pass, axis=0), per_pass, peaks


def _rho(m: dict) -> str:
    """A metrics dict's Spearman as text ("-" where there are too few points for one)."""
    return "-" if m.get("spearman") is None else f"{m['spearman']:.3f}"


def _reexec_with_malloc_env(argv) -> None:
    """Re-runs this script with `codesign.bench.MALLOC_ENV` (read by glibc at process start)."""
    reexec_with_malloc_env(__file__, argv)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small grid (CI smoke run)")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--passes", type=int, default=None,
                    help="timed passes over the grid, the median kept (default 3 on CPU, 1 on GPU and with --quick)")
    ap.add_argument("--hw", default=None, help="preset to calibrate (default: cpu, or h100 on a GPU)")
    ap.add_argument("--out", default=None, help="results JSON (default results/[gpu/]hwmodel_validation_<hw>[_quick].json)")
    ap.add_argument("--refit", default=None, metavar="FILE",
                    help="take the points and measured times from FILE (a result of this script) instead of timing")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--merge", nargs="*", default=(), metavar="FILE",
                    help="with --refit: more results of this script on the same grid whose timed passes are "
                         "pooled with FILE's (median over all passes; roofs: median of the files' roofs)")
    ap.add_argument("--save-preset", action="store_true",
                    help="write the fitted roofs and factors to codesign/hwmodel/fits/cpu.json (the `cpu` preset)")
    ap.add_argument("--peaks-only", action="store_true",
                    help="only measure this host's roofs (seconds) and write them into the cpu fit record")
    ap.add_argument("--no-grouped", action="store_true", help="skip the grouped cross-validation (faster)")
    ap.add_argument("--exclude-kinds", nargs="*", default=(), metavar="KIND",
                    help="kernel kinds that are timed and reported but never fitted (e.g. gemm_numpy where its "
                         "timings are scheduler-bound: OpenBLAS threads waiting out co-tenants' time slices)")
    ap.add_argument("--max-work", type=float, default=None,
                    help="skip SpMM points with nnz x width above this (default 4e8 on CPU, 4e9 on GPU)")
    args = ap.parse_args(argv)
    prev = None
    if args.refit:
        import json
        with open(args.refit) as fh:
            prev = json.load(fh)
    gpu = (prev["machine"]["backend"] if prev else jax.default_backend()) == "gpu"
    if not prev and not gpu and __name__ == "__main__":
        _reexec_with_malloc_env(sys.argv[1:] if argv is None else list(argv))
    hw_name = args.hw or (prev or {}).get("hw") or ("h100" if gpu else "cpu")
    args.reps = args.reps or (3 if args.quick else (20 if gpu else 7))
    args.passes = args.passes or (1 if args.quick or gpu else 3)
    args.max_work = args.max_work or (4e9 if gpu else 4e8)
    out = args.out or (f"results/{'gpu/' if gpu else ''}hwmodel_validation_{hw_name}"
                       f"{'_quick' if args.quick else ''}.json")

    if args.peaks_only:
        args.reps, args.passes = args.reps or 5, args.passes or 3
        return peaks_only(args)

    graph_data = graphs(prev["quick"] if prev else args.quick, args.data_root, gpu)
    if prev:
        points = [{k: v for k, v in q.items() if k not in ("measured_s", "modeled_s", "uncalibrated_s", "split")}
                  for q in prev["points"]]
        measured = np.asarray([q["measured_s"] for q in prev["points"]])
        peaks = prev.get("peaks")
        per_pass = np.asarray(prev["per_pass_s"]) if prev.get("per_pass_s") else None
        if args.merge:
            prev = merge_runs(prev, args.merge)
            per_pass, peaks = np.asarray(prev["per_pass_s"]), prev["peaks"]
            measured = np.median(per_pass, axis=0)
    else:
        features = None if gpu else feature_data(args.quick, args.data_root)
        points, measured, per_pass, peaks = measure(args, gpu, graph_data, features)
    stages = [point_stages(p, graph_data, gpu) for p in points]
    host_record = prev["machine"] if prev else machine()  # the host the timings come from
    cores = float(host_record.get("cpu_count") or 1) if not gpu else 1.0
    # the CPU's last-level cache is lscpu's L3 of the timed host (not fitted; `HardwareSpec.llc_bytes`)
    llc = None if gpu else host_record.get("l3_bytes")
    base = with_roofs(hwmodel.presets.get(hw_name), peaks).replace(
        matrix_efficiency=1.0, vector_efficiency=1.0, dram_efficiency=1.0, gather_efficiency=1.0,
        overlap_exponent=16.0, stage_overhead_s=0.0, cores=cores, llc_bytes=None if llc is None else float(llc),
        parallel_stage_bytes=None if gpu else 1e6, gemm_pack_byte_s=0.0)
    host = [p["kind"] in HOST_KINDS for p in points]
    f = latency_model(stages, base, host)
    rng = np.random.default_rng(0)
    # --exclude-kinds: timed and reported, never fitted (each predicted by fits that never saw its kind)
    excluded = np.array([p["kind"] in args.exclude_kinds for p in points])
    usable = np.flatnonzero(~excluded)
    order = usable[rng.permutation(usable.size)]
    train_idx, test_idx = np.sort(order[: usable.size // 2]), np.sort(order[usable.size // 2:])
    nominal_ratio = base.matrix_bf16_macs_per_s / base.matrix_fp32_macs_per_s if base.matrix_bf16_macs_per_s else 1.0
    before = np.asarray(f(jnp.asarray([1.0, 1.0, 1.0, 0.0, nominal_ratio, 1.0, 16.0, 0.0, base.onchip_buffer_bytes,
                                       0.0, 0.0, 0.0, 0.0, 0.0, 1.0], jnp.float32)))
    shipped = hwmodel.presets.get(hw_name)  # the preset as committed (its own roofs and factors), no fit

    def shipped_factors(bf16_ratio):
        host_call = hwmodel.presets.get("cpu_numpy").stage_overhead_s if hw_name == "cpu" else 0.0
        pack = hwmodel.presets.get("cpu_numpy").gemm_pack_byte_s if hw_name == "cpu" else 0.0
        return jnp.asarray([bf16_ratio if k == "bf16_gemm_rate_ratio" else host_call if k == "host_stage_overhead_s"
                            else pack if k == "gemm_pack_byte_s"
                            else 1.0 if getattr(shipped, k) is None else getattr(shipped, k) for k in FACTORS],
                           jnp.float32)

    as_shipped = np.asarray(latency_model(stages, shipped, host)(shipped_factors(
        shipped.matrix_bf16_macs_per_s / shipped.matrix_fp32_macs_per_s)))
    # the --peaks-only workflow: the preset's fitted factors with this run's measured roofs
    as_peaks = None if not peaks else np.asarray(latency_model(stages, with_roofs(shipped, peaks), host)(
        shipped_factors(1.0)))
    # CPU: a bf16 GEMM is an f32 GEMM plus converts (point_stages), so its rate ratio stays 1;
    # GPU: no stage with streaming vector arithmetic is timed, so vector_efficiency stays 1
    x0 = [0.5, 1.0 if gpu else 0.5, 0.5, 1e-5, nominal_ratio if gpu else 1.0, 0.5, 4.0, 1e-10,
          base.onchip_buffer_bytes if gpu else 4.0 * 1024**2, 0.0 if gpu else 1e-9, 1e-6, 1e-13 if gpu else 1e-9,
          1e-13 if gpu else 1e-9, 1e-15 if gpu else 1e-10, 1e6]
    # row_overhead_s (9) is fitted where a kernel with a per-output-row loop is timed (scipy's CSR),
    # host_stage_overhead_s (10) where a numpy / scipy kernel is
    row_loop = any(p["kind"] in ("csr_scipy", "csr_features") for p in points)
    free = (0, 2, 3, 4, 5, 6, 7) if gpu else ((0, 1, 2, 3, 5, 6, 7, 8) + ((9,) if row_loop else ())
                                               + ((10,) if any(host) else ()) + (11,)
                                               + ((12,) if base.llc_bytes is not None else ())
                                               + ((13,) if any(p["kind"] == "gemm_numpy" for p in points) else ())
                                               + (14,))
    theta = fit(f, measured, train_idx, x0=x0, free=free)
    after = np.asarray(f(jnp.asarray(theta, jnp.float32)))
    # the same fit on other random halves: how much the held-out error depends on the split
    other_splits = []
    for split_seed in range(1, SPLIT_SEEDS + 1):
        o = usable[np.random.default_rng(split_seed).permutation(usable.size)]
        tr, te = np.sort(o[: usable.size // 2]), np.sort(o[usable.size // 2:])
        th = fit(f, measured, tr, x0=x0, free=free)
        other_splits.append({"seed": split_seed, **metrics(np.asarray(f(jnp.asarray(th, jnp.float32)))[te],
                                                            measured[te])})
    graph_rows = {g: n for g, (_, _, n) in graph_data.items()}
    grouped = None if args.no_grouped else grouped_validation(f, measured, points, x0, free, excluded, graph_rows)
    kinds = np.array([p["kind"] for p in points])
    kd = np.array([f'{p["kind"]}/{p["dtype"]}' for p in points])
    train_set = set(train_idx.tolist())
    held = metrics(after[test_idx], measured[test_idx])
    result = {
        "what": f"cost model (hwmodel {hw_name} preset) vs measured kernel times on this machine",
        "date": prev["date"] if prev else datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "fitted_date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": host_record, "hw": hw_name,
        "malloc_env": prev.get("malloc_env") if prev else {k: os.environ.get(k) for k in MALLOC_ENV},
        "peaks": peaks,
        "load_average_per_pass": prev.get("load_average_per_pass") if prev else LOAD_PER_PASS,
        "per_pass_mape_from_median": (None if per_pass is None or len(per_pass) < 2 else
                                      [float(np.mean(np.abs(r - measured) / measured)) for r in per_pass]),
        "rapl": prev.get("rapl") if prev and prev.get("rapl") else rapl_status(),
        "graphs": {g: {"nodes": int(n), "edges": int(s_.size)} for g, (s_, _, n) in graph_data.items()},
        "quick": prev["quick"] if prev else args.quick, "reps": prev["reps"] if prev else args.reps,
        "passes": prev.get("passes", 1) if prev else args.passes,
        "merged_dates": prev.get("merged_dates") if prev else None,
        "peaks_by_run": prev.get("peaks_by_run") if prev else None,
        "fitted": dict(zip(FACTORS, map(float, theta))),
        "grouped": grouped,
        "excluded_kinds": list(args.exclude_kinds),
        # the kinds never fitted, predicted by the fit on the random half (a whole-kind held-out check)
        "excluded_by_kind": {k: metrics(after[kinds == k], measured[kinds == k])
                             for k in args.exclude_kinds if (kinds == k).sum() >= 2},
        "held_out": held,
        "held_out_by_kind": {k: metrics(after[test_idx][kinds[test_idx] == k], measured[test_idx][kinds[test_idx] == k])
                             for k in dict.fromkeys(kinds[test_idx].tolist())},
        "held_out_by_kind_dtype": {k: metrics(after[test_idx][kd[test_idx] == k], measured[test_idx][kd[test_idx] == k])
                                   for k in dict.fromkeys(kd.tolist()) if (kd[test_idx] == k).sum() >= 2},
        "train": metrics(after[train_idx], measured[train_idx]),
        "held_out_other_splits": other_splits,
        "held_out_mape_over_splits": {"median": float(np.median([m["mape"] for m in other_splits + [held]])),
                                      "max": float(np.max([m["mape"] for m in other_splits + [held]])),
                                      "n_splits": len(other_splits) + 1},
        "uncalibrated_held_out": metrics(before[test_idx], measured[test_idx]),
        # the measurement's own spread: each pass against the median of all passes
        "measurement_noise_mape": (None if per_pass is None or len(per_pass) < 2 else
                                   float(np.mean(np.abs(per_pass - measured) / measured))),
        "per_pass_s": None if per_pass is None else per_pass.tolist(),
        "preset_as_shipped": metrics(as_shipped, measured),
        "preset_factors_with_measured_roofs": None if as_peaks is None else metrics(as_peaks, measured),
        "points": [{**p, "measured_s": float(m), "modeled_s": float(a), "uncalibrated_s": float(b),
                    "split": "train" if i in train_set else ("excluded" if excluded[i] else "test")}
                   for i, (p, m, a, b) in enumerate(zip(points, measured, after, before))],
    }
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    write_json_atomic(out, result)
    if args.save_preset:
        if gpu or hw_name != "cpu" or not peaks:
            raise SystemExit("--save-preset: only for the cpu preset fitted on measured roofs")
        save_cpu_fit({**result, "out": out}, FIT_PATH)
        print(f"wrote {os.path.relpath(FIT_PATH)}")
    h = result["held_out"]
    if peaks:
        print("measured roofs: " + ", ".join(f"{k} {v:.3g}" for k, v in peaks.items()))
    print(f"{len(points)} kernels on {result['machine'].get('device', result['machine']['backend'])}; fitted {result['fitted']}")
    print(f"held-out: MAPE {100 * h['mape']:.1f} %, Spearman {_rho(h)} (n={h['n']}); "
          f"uncalibrated MAPE {100 * result['uncalibrated_held_out']['mape']:.1f} %")
    if result["measurement_noise_mape"] is not None:
        print(f"measurement noise: a single pass is {100 * result['measurement_noise_mape']:.1f} % (MAPE) from the "
              f"median of {len(per_pass)}")
    a = result["preset_as_shipped"]
    print(f"the {hw_name} preset as shipped (no fit) on all {a['n']} points: MAPE {100 * a['mape']:.1f} %, "
          f"Spearman {_rho(a)}")
    if result["preset_factors_with_measured_roofs"]:
        a = result["preset_factors_with_measured_roofs"]
        print(f"its fitted factors with this run's measured roofs (--peaks-only): MAPE {100 * a['mape']:.1f} %, "
              f"Spearman {_rho(a)}")
    o = result["held_out_mape_over_splits"]
    print(f"held-out MAPE over {o['n_splits']} random halves: median {100 * o['median']:.1f} %, "
          f"max {100 * o['max']:.1f} %")
    for k, m in {**result["held_out_by_kind"], **result["held_out_by_kind_dtype"]}.items():
        print(f"  {k}: MAPE {100 * m['mape']:.1f} %, Spearman {_rho(m)} (n={m['n']})")
    for k, m in result["excluded_by_kind"].items():
        print(f"  {k} (never fitted): MAPE {100 * m['mape']:.1f} %, Spearman {_rho(m)} (n={m['n']})")
    for name, g in (grouped or {}).items():
        kinds_txt = ", ".join(f"{k} {100 * v['mape']:.1f} %" for k, v in g["by_kind"].items())
        print(f"{name}: MAPE {100 * g['mape']:.1f} %, Spearman {_rho(g)} (n={g['n']}; {kinds_txt}); "
              f"worst group {g['worst_group']['group']} {100 * g['worst_group']['mape']:.1f} %")
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
