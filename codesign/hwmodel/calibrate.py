"""Calibration of a preset against kernels timed on a machine: the roofs measured there, the
software factors fitted by robust least squares on log latency, and grouped cross-validation.

`experiments/hwmodel_validation.py` is the driver: it times a grid of kernels (XLA GEMMs and
segment_sum SpMMs, the deployed programs' numpy / scipy kernels), builds each point's stages, and
calls these functions; ``--save-preset`` writes the `cpu` preset's record with `save_cpu_fit`.
Device timing tables (public GPU timings) are fitted by `codesign.hwmodel.tables`.

Fitting (`fit`): scipy's ``soft_l1`` robust least squares (`FIT_LOSS`, scale `FIT_SCALE`: residuals
beyond ~10 % count about linearly) on log(modeled / measured), in log-parameters within bounds.
Grouped cross-validation (`grouped_validation`): per grouping of `group_keys` (leave one graph out,
one width out, one dtype out) every group is predicted by a fit that never saw it.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import time
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize
import scipy.stats

from codesign.hwmodel.estimate import stage_cost
from codesign.hwmodel.spec import HardwareSpec

FACTORS = ("matrix_efficiency", "vector_efficiency", "dram_efficiency", "stage_overhead_s", "bf16_gemm_rate_ratio",
           "gather_efficiency", "overlap_exponent", "row_gather_overhead_s", "onchip_buffer_bytes", "row_overhead_s",
           "host_stage_overhead_s", "row_miss_overhead_s", "line_miss_overhead_s", "gemm_pack_byte_s",
           "parallel_stage_bytes")
"""The host factors `fit` adjusts, in the order of its parameter vector. host_stage_overhead_s: the
fixed cost of one numpy / scipy call in a deployed program (priced on `cpu_numpy`: one core), where
stage_overhead_s is XLA's dispatch; onchip_buffer_bytes is fitted on the CPU: the cache a kernel
effectively has on a shared VM is not the L3 that lscpu reports (that one is `HardwareSpec.llc_bytes`, not
fitted: line_miss_overhead_s prices the gathered lines that miss it). gemm_pack_byte_s: numpy's (OpenBLAS's)
operand packing, on the `cpu_numpy` side only; parallel_stage_bytes: the size above which XLA:CPU runs an
elementwise loop on its thread pool (fitted where ``base`` has one: not on a GPU)."""
FIT_LOSS, FIT_SCALE = "soft_l1", 0.1


def median_time_s(fn, *args, reps: int, warmup: bool = True) -> float:
    """Median wall time (s) of ``fn(*args)`` over ``reps`` runs, each waited for with
    `jax.block_until_ready`, after one untimed warm-up (compile) run."""
    if warmup:
        jax.block_until_ready(fn(*args))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def metrics(pred, meas) -> dict:
    """``{"n", "mape", "spearman", "median_ratio"}`` of predictions against measurements over the
    finite pairs (``spearman`` None below 2 pairs; all None for none)."""
    pred, meas = np.asarray(pred, np.float64), np.asarray(meas, np.float64)
    ok = np.isfinite(pred) & np.isfinite(meas)
    pred, meas = pred[ok], meas[ok]
    if meas.size == 0:
        return {"n": 0, "mape": None, "spearman": None, "median_ratio": None}
    rho = float(scipy.stats.spearmanr(pred, meas).statistic) if meas.size >= 2 else None
    return {"n": int(meas.size), "mape": float(np.mean(np.abs(pred - meas) / meas)), "spearman": rho,
            "median_ratio": float(np.median(pred / meas))}


def repriced(rows: list, preset: str) -> dict:
    """The record of measured points priced again by today's fit of the measured ``preset``
    (``rows``: dicts with ``measured_s``, ``modeled_s_recorded`` as stored and ``modeled_s`` as
    priced now): ``{"preset", "fit_date", "timings_date", "summary": {"modeled_s_recorded",
    "modeled_s"} (`metrics` of each against ``measured_s``), "points": rows}``. Written by the
    experiments' ``--reprice`` modes, so that a change of the cost model is checked on stored
    measurements without timing them again.

    Raises:
      FileNotFoundError, ValueError: as `codesign.hwmodel.presets.load_fit`.
    """
    from codesign.hwmodel.presets import load_fit
    fit = load_fit("cpu")
    meas = [r["measured_s"] for r in rows]
    return {"preset": preset, "fit_date": fit["fitted_date"], "timings_date": fit["date"],
            "summary": {k: metrics([r[k] for r in rows], meas) for k in ("modeled_s_recorded", "modeled_s")},
            "points": rows}


def timed(fn, *args, reps: int) -> float:
    """Median seconds of ``reps`` back-to-back calls after ``reps`` untimed ones (the first call
    compiles). One warm-up call is not enough on the CPU: the first calls after a pause run up
    to 1.5x slower while XLA's worker threads wake (measured: a 2708 x 64 x 64 f32 GEMM, median
    of 7 right after compiling 0.51 ms, of the next 7 0.36 ms), and a training loop calls its
    kernels back to back."""
    for _ in range(reps):
        jax.block_until_ready(fn(*args))
    return median_time_s(fn, *args, reps=reps, warmup=False)


PEAK_GEMM = 2048  # M = K = N of the GEMM that sets the matrix roof
PEAK_FMA_ELEMENTS, PEAK_FMA_CHAIN = 1 << 18, 64  # 1 MiB of f32 (cache resident), 64 dependent FMAs each
PEAK_STREAM_ELEMENTS = 1 << 26  # 256 MiB of f32 read and 256 MiB written


def measure_roofs(reps: int) -> dict:
    """The roofs of this CPU as XLA reaches them, measured before the grid so that the fitted
    efficiencies are fractions of what this machine does (a preset's nominal rates belong to the
    machine it was made on: numpy ran a 2048^3 f32 dot at 182 GFLOP/s on the 2026-11-22 AVX2
    host and at 244 on the 2026-11-23 AVX-512 one, where XLA reached 433-439):

      matrix_macs_per_s: a ``PEAK_GEMM``^3 f32 ``jnp.dot`` (MACs / median seconds);
      vector_macs_per_s: ``PEAK_FMA_CHAIN`` chained ``x * a + b`` per element over
        ``PEAK_FMA_ELEMENTS`` f32 (XLA fuses the chain into one loop; a and b are runtime scalars,
        so nothing folds);
      dram_bw_bytes_per_s: ``x * 2`` over ``PEAK_STREAM_ELEMENTS`` f32 (bytes read + written).

    Returns:
      ``{"matrix_macs_per_s", "vector_macs_per_s", "dram_bw_bytes_per_s"}`` (floats).
    """
    key = jax.random.key(1)
    a = jax.random.normal(key, (PEAK_GEMM, PEAK_GEMM), jnp.float32)
    gemm_s = timed(jax.jit(jnp.dot), a, a, reps=reps)

    @jax.jit
    def fma_chain(x, m, c):
        for _ in range(PEAK_FMA_CHAIN):
            x = x * m + c
        return x

    x = jax.random.normal(key, (PEAK_FMA_ELEMENTS,), jnp.float32)
    fma_s = timed(fma_chain, x, jnp.float32(0.999), jnp.float32(1e-3), reps=reps)
    big = jnp.ones((PEAK_STREAM_ELEMENTS,), jnp.float32)
    stream_s = timed(jax.jit(lambda v: v * 2.0), big, reps=reps)
    return {"matrix_macs_per_s": PEAK_GEMM**3 / gemm_s,
            "vector_macs_per_s": PEAK_FMA_ELEMENTS * PEAK_FMA_CHAIN / fma_s,
            "dram_bw_bytes_per_s": 2 * 4 * PEAK_STREAM_ELEMENTS / stream_s}


def with_roofs(hw: HardwareSpec, peaks: Optional[dict]) -> HardwareSpec:
    """``hw`` with its nominal roofs replaced by measured ``peaks`` (`measure_roofs`; None: ``hw``
    as it is). XLA:CPU has no faster bf16 / int8 path than f32 (a bf16 dot is converts around
    an f32 dot, `hwmodel.upcast_gemm_stages`), so every precision gets the f32 rate."""
    if not peaks:
        return hw
    mm, vec = peaks["matrix_macs_per_s"], peaks["vector_macs_per_s"]
    return hw.replace(matrix_fp32_macs_per_s=mm, matrix_bf16_macs_per_s=mm, matrix_int8_macs_per_s=mm,
                      matrix_int4_macs_per_s=mm, vector_fp32_macs_per_s=vec, vector_bf16_macs_per_s=vec,
                      vector_int8_macs_per_s=vec, dram_bw_bytes_per_s=peaks["dram_bw_bytes_per_s"])


def latency_model(stages, base: HardwareSpec, host=None):
    """A jitted ``theta -> latencies`` for the calibration factors ``theta`` (see `FACTORS`; the
    bf16 GEMM rate is ``theta[4]`` times ``base``'s fp32 rate). ``host``: per kernel, whether it
    is a deployed program's numpy / scipy kernel (`HOST_KINDS`), priced as the `cpu_numpy` preset
    prices it (``base`` on one core, `HardwareSpec.single_core`, with ``theta[10]`` per call, ``theta[13]``
    per packed GEMM operand byte and no thread-pool threshold);
    the others as XLA runs them on every core (the `cpu` preset)."""
    host = [False] * len(stages) if host is None else list(host)

    @jax.jit
    def f(theta):
        hw = dataclasses.replace(base, matrix_efficiency=theta[0], vector_efficiency=theta[1],
                                 dram_efficiency=theta[2], stage_overhead_s=theta[3],
                                 matrix_bf16_macs_per_s=base.matrix_fp32_macs_per_s * theta[4],
                                 gather_efficiency=theta[5], overlap_exponent=theta[6],
                                 row_gather_overhead_s=theta[7], onchip_buffer_bytes=theta[8],
                                 row_overhead_s=theta[9], row_miss_overhead_s=theta[11],
                                 line_miss_overhead_s=theta[12],
                                 parallel_stage_bytes=None if base.parallel_stage_bytes is None else theta[14])
        one = dataclasses.replace(hw.single_core(), stage_overhead_s=theta[10], gemm_pack_byte_s=theta[13],
                                  parallel_stage_bytes=None)
        return jnp.stack([sum(stage_cost(s, one if h else hw).latency_s for s in kernel)
                          for kernel, h in zip(stages, host)])
    return f


def fit(f, measured, train_idx, x0, free=(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14)):
    """Robust least squares (`FIT_LOSS` with scale `FIT_SCALE`: scipy's ``soft_l1``,
    ``2 (sqrt(1 + (r/s)^2) - 1)``, quadratic below ~10 % and linear above, so that a few
    kernels timed through a shared L3 (this VM's 32 MiB L3 is not ours alone) do not pull the
    fit) on log(modeled / measured) over the training points, in log-parameters (efficiencies
    in [1e-5, 1], overhead in [1 ns, 1 ms], bf16/fp32 GEMM rate in [0.01, 4], overlap exponent
    in [1, 64], per-row gather overhead in [0.1 ps, 1 us], on-chip buffer in [64 KiB, 1 GiB],
    per-output-row overhead in [1 ps, 1 us], per numpy / scipy call in [1 ns, 1 ms], per missed
    row and per line missing the last-level cache in [0.1 ps, 1 us], per packed GEMM operand byte in
    [1 fs, 1 us], the thread-pool threshold of an elementwise
    stage in [1 kB, 10 GB]; the order of `FACTORS`) from ``x0``;
    only the factors at the indices ``free`` are fitted, the others stay at ``x0``. The model is
    evaluated in float32, so the finite-difference step is set explicitly (1e-3 in log space)."""
    y = np.log(measured[train_idx])
    free = list(free)
    lo = np.log([1e-5, 1e-5, 1e-5, 1e-9, 1e-2, 1e-5, 1.0, 1e-13, 65536.0, 1e-12, 1e-9, 1e-13, 1e-13,
                 1e-15, 1e3])
    hi = np.log([1.0, 1.0, 1.0, 1e-3, 4.0, 1.0, 64.0, 1e-6, 2.0**30, 1e-6, 1e-3, 1e-6, 1e-6, 1e-6, 1e10])
    u0 = np.clip(np.log(np.maximum(np.asarray(x0, np.float64), 1e-300)), lo, hi)

    def full(u):
        v = u0.copy()
        v[free] = u
        return v

    def resid(u):
        return np.log(np.asarray(f(jnp.asarray(np.exp(full(u)), jnp.float32)))[train_idx]) - y

    res = scipy.optimize.least_squares(resid, x0=u0[free], bounds=(lo[free], hi[free]), diff_step=1e-3,
                                       loss=FIT_LOSS, f_scale=FIT_SCALE)
    return np.exp(full(res.x))


def group_keys(points, graph_rows: Optional[dict] = None) -> dict:
    """Per grouping, the group of every point (None: the point is never held out in it):
    ``leave_one_graph_out``: a point's graph; a GEMM (no graph) joins the graph whose node count
    is its row count ``m`` where exactly one graph of ``graph_rows`` (``{graph: n_nodes}``) has it
    (a layer's combination GEMM on that graph), else the group ``rows=<m>``, so GEMMs are held
    out too;
    ``leave_one_width_out``: ``<kind>/<width>`` (SpMM: feature columns; GEMM: output columns n);
    ``leave_one_dtype_out``: ``<kind>/<dtype>``, for kinds timed in more than one dtype (the
    numpy / scipy kinds, float32 only, always train: holding one out would leave out the kind).
    A graph's group holds every kind timed on it (its SpMMs and its feature products)."""
    dtypes = {}
    for p in points:
        dtypes.setdefault(p["kind"], set()).add(p["dtype"])
    by_rows = {}
    for g, n in (graph_rows or {}).items():
        by_rows.setdefault(int(n), []).append(g)

    def graph_of(p):
        if p.get("graph") is not None or "m" not in p:
            return p.get("graph")
        owners = by_rows.get(int(p["m"]), [])
        return owners[0] if len(owners) == 1 else f"rows={int(p['m'])}"

    return {
        "leave_one_graph_out": [graph_of(p) for p in points],
        "leave_one_width_out": [f'{p["kind"]}/{p["width"] if "width" in p else p["n"]}' for p in points],
        "leave_one_dtype_out": [f'{p["kind"]}/{p["dtype"]}' if len(dtypes[p["kind"]]) > 1 else None for p in points],
    }


def grouped_validation(f, measured, points, x0, free, exclude=None, graph_rows: Optional[dict] = None) -> dict:
    """Grouped cross-validation: for each grouping (`group_keys`) and each of its groups, fit on
    every point outside the group and predict the group's points (``exclude``: a boolean mask of
    points that are neither fitted nor held out, `--exclude-kinds`). Returns, per grouping,
    ``{"mape", "spearman", "n"}`` over all held-out predictions pooled, ``"by_kind"`` (the same
    per kernel kind), ``"by_group"`` (``{group: {"mape", "spearman", "n"}}``) and
    ``"worst_group"`` (name and MAPE)."""
    kinds = np.array([p["kind"] for p in points])
    use = np.ones(len(points), bool) if exclude is None else ~np.asarray(exclude, bool)
    out = {}
    for grouping, keys in group_keys(points, graph_rows).items():
        keys = np.array([k if k is not None else "" for k in keys])
        pred = np.full(len(points), np.nan)
        by_group = {}
        for g in sorted(set(keys[use].tolist()) - {""}):
            test = np.flatnonzero((keys == g) & use)
            train = np.flatnonzero((keys != g) & use)
            th = fit(f, measured, train, x0=x0, free=free)
            pred[test] = np.asarray(f(jnp.asarray(th, jnp.float32)))[test]
            by_group[g] = metrics(pred[test], measured[test]) if test.size >= 2 else {
                "mape": float(np.mean(np.abs(pred[test] - measured[test]) / measured[test])), "spearman": None,
                "n": int(test.size)}
        held = np.flatnonzero(~np.isnan(pred))
        worst = max(by_group, key=lambda g: by_group[g]["mape"])
        out[grouping] = {**metrics(pred[held], measured[held]),
                         "by_kind": {k: metrics(pred[held][kinds[held] == k], measured[held][kinds[held] == k])
                                     for k in dict.fromkeys(kinds[held].tolist())},
                         "by_group": by_group, "worst_group": {"group": worst, "mape": by_group[worst]["mape"]}}
    return out


def rapl_status() -> dict:
    """Whether Intel RAPL energy counters (``/sys/class/powercap/intel-rapl*/energy_uj``) can be read
    here: ``{"readable": bool, "detail": str}``."""
    root = "/sys/class/powercap"
    if not os.path.isdir(root):
        return {"readable": False, "detail": f"{root} does not exist (no powercap driver in this VM)"}
    zones = [z for z in sorted(os.listdir(root)) if z.startswith("intel-rapl")]
    for z in zones:
        try:
            with open(os.path.join(root, z, "energy_uj")) as fh:
                return {"readable": True, "detail": f"{z}/energy_uj = {fh.read().strip()}"}
        except OSError as e:
            last = f"{z}/energy_uj: {e}"
    return {"readable": False, "detail": last if zones else f"no intel-rapl zone under {root}"}


SIMD_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile")  # the vector ISA levels XLA:CPU can use


def machine() -> dict:
    """Where the timings come from: platform, JAX, device, and on Linux the CPU model, its
    `SIMD_FLAGS` and MHz (/proc/cpuinfo): cloud hosts of one name differ in these from day to day."""
    d = jax.devices()[0]
    out = {"platform": platform.platform(), "processor": platform.processor(), "cpu_count": os.cpu_count(),
           "jax": jax.__version__, "backend": jax.default_backend(), "device": getattr(d, "device_kind", str(d)),
           "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS")}
    try:
        with open("/proc/cpuinfo") as fh:
            info = dict(line.split(":", 1) for line in fh.read().split("\n\n")[0].splitlines() if ":" in line)
        info = {k.strip(): v.strip() for k, v in info.items()}
        flags = set(info.get("flags", "").split())
        out.update(cpu_model=info.get("model name"), cpu_mhz=info.get("cpu MHz"),
                   simd=[f for f in SIMD_FLAGS if f in flags])
    except OSError:
        pass
    try:  # the last-level cache (the preset's on-chip buffer)
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as fh:
            size = fh.read().strip()
        out["l3_bytes"] = int(size[:-1]) * {"K": 1024, "M": 1024**2}[size[-1]] if size[-1] in "KM" else int(size)
    except (OSError, ValueError, KeyError):
        pass
    return out


def fit_host(name: str = "cpu_numpy") -> Optional[dict]:
    """Whether the measured preset ``name`` was fitted on the host this process runs on:
    ``{"fit": {cpu_model, simd}, "here": {cpu_model, simd}, "matches": bool}`` (``simd``: the
    `calibrate.SIMD_FLAGS` present), comparing ``fits/cpu.json``'s host with /proc/cpuinfo. None
    for a preset that is not measured (`presets.MEASURED_PRESETS`). A cloud VM of one name lands on
    different CPUs from day to day (`codesign.hwmodel.presets.cpu`'s docstring); a measured
    program's ``modeled_local`` is only a check of the model where this is True.

    Raises:
      FileNotFoundError, ValueError: as `load_fit`.
    """
    from codesign.hwmodel.presets import MEASURED_PRESETS, load_fit
    if name not in MEASURED_PRESETS:
        return None
    keys = ("cpu_model", "simd")
    fit = {k: load_fit("cpu")["host"].get(k) for k in keys}
    here = {k: machine().get(k) for k in keys}
    return {"fit": fit, "here": here, "matches": fit == here}


def save_cpu_fit(result: dict, path, old: Optional[dict] = None) -> dict:
    """Writes the `cpu` preset's fit record (`codesign.hwmodel.presets.load_fit`) from a result of
    this script: the host, the dates, the measured roofs, the fitted factors and the validation
    summary. ``old``: a previous record whose factors are kept (``--peaks-only``)."""
    from codesign.hwmodel.presets import FIT_FACTORS, HOST_FIT_FACTORS
    from codesign.results import write_json_atomic
    m = result["machine"]
    fitted = dict(old["fitted"]) if old else {k: result["fitted"][k] for k in FIT_FACTORS
                                              + HOST_FIT_FACTORS if k in result["fitted"]}
    buffer = old["onchip_buffer_bytes"] if old else result["fitted"]["onchip_buffer_bytes"]
    rec = {
        "what": "the fitted `cpu` preset (codesign.hwmodel.presets.cpu): measured roofs and calibration factors",
        "host": {k: m.get(k) for k in ("cpu_model", "simd", "cpu_mhz", "cpu_count", "l3_bytes", "platform", "jax")},
        "date": result["date"], "fitted_date": result["fitted_date"],
        "roofs": dict(result["peaks"]), "fitted": fitted,
        "onchip_buffer_bytes": float(buffer),  # fitted: the cache a kernel effectively has (host.l3_bytes: lscpu)
        "clock_hz": float(m["cpu_mhz"]) * 1e6 if m.get("cpu_mhz") else (old or {}).get("clock_hz", 2.6e9),
        "command": "python experiments/hwmodel_validation.py --save-preset",
        "validation": ({"factors_from": f"{old['host'].get('cpu_model')} fit of {old['fitted_date']} (--peaks-only)"}
                       if old else {"held_out": result.get("held_out"), "grouped_mape": {
                           k: v["mape"] for k, v in (result.get("grouped") or {}).items()},
                           "excluded_kinds": result.get("excluded_kinds") or [],
                           "results_file": result.get("out")}),
    }
    write_json_atomic(path, rec)
    _warn_if_node_differs(rec["host"])
    return rec


def _warn_if_node_differs(host: dict) -> None:
    """One line on stderr when the fitted host's process node (`presets.cpu_process_node`) is not the
    one `presets.PROCESS_NODES` ``["cpu"]`` prices the `cpu` preset's energies at (update it, with
    its source, before committing the fit; tests/test_hwmodel_energy.py fails until then)."""
    import sys
    from codesign.hwmodel.presets import PROCESS_NODES, cpu_process_node
    try:
        node = cpu_process_node(host)
    except ValueError as e:
        print(f"save_cpu_fit: {e}: set PROCESS_NODES['cpu'] by hand", file=sys.stderr)
        return
    if node != PROCESS_NODES["cpu"][:2]:
        print(f"save_cpu_fit: the fitted host is a {node[0]:g} nm part, PROCESS_NODES['cpu'] says "
              f"{PROCESS_NODES['cpu'][0]:g} nm: update it (codesign/hwmodel/presets.py)", file=sys.stderr)
