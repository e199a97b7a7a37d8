"""Device timing tables: reading and checking them, fitting a preset's software factors on them with
cross-validation grouped by matrix, and the per-kernel report that ``codesign validate --table``
prints (the fitting core and `metrics` are `codesign.hwmodel.calibrate`'s).

A *timing table* is a CSV with one row per (matrix, width): columns ``matrix`` (name; the group of
grouped cross-validation), ``n_rows``, ``nnz``, ``width`` and one ``<kernel>_ms`` column per kernel
(milliseconds per call; blank where the kernel was not run). The public H100 table of
``shared/data/gpu_timings/`` (FlashSparse, Li et al., PPoPP 2025) has this format. The kind of
kernel (``"spmm"``: ``Y[n, w] = A[n, n] @ X[n, w]``; ``"sddmm"``: ``out[e] = <Q[row e], K[col e]>``
over the ``nnz`` nonzeros of width ``w``) is read from the file name (``sddmm`` in it) unless given.

Each row becomes one `Stage` (`table_stage`): the CSR kernel's compulsory traffic (row pointers,
column ids, values, X once with 32-byte sectors, Y once), the re-gathered rows that miss on chip,
and per output row / per gathered row work. A fit adjusts the spec's software factors
(`TABLE_FACTORS`: fixed per-call cost, DRAM and gather efficiency, the effective L2 bandwidth of
the gathers, per-row costs, the compute / memory overlap) and one workload term the table cannot
give, ``table_locality``: the share of a matrix's rows its re-references fall among (the tables
give sizes only, not the matrices; SuiteSparse matrices are mostly banded meshes, far more local
than the uniform re-reference of the capacity model). The locality term belongs to the table, not
to the hardware: a preset keeps its datasheet L2, and a graph's own locality comes from its
measured `LocalityProfile`.

Fitting is robust least squares (scipy's ``soft_l1``, scale 0.1: residuals beyond ~10 % count about
linearly) in log-parameters within `TABLE_BOUNDS`, on one of `RESIDUALS`: ``"log"`` (log modeled /
measured: median-unbiased) or ``"relative"`` (modeled / measured - 1: the reported MAPE itself,
which weighs over-prediction more). `fit_table` can try both and keep, per kernel column, the one
with the lower grouped-CV MAPE (both CV results are kept in its record). Cross-validation is grouped
by matrix (scikit-learn's ``GroupKFold``): every width of a matrix is held out together, so no
held-out row has a twin in its training set.
"""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from codesign.hwmodel.calibrate import FIT_LOSS, FIT_SCALE, metrics
from codesign.hwmodel.estimate import stage_cost
from codesign.hwmodel.spec import HardwareSpec
from codesign.hwmodel.workload import INDEX_BYTES, VALUE_BYTES, Stage, csr_chunk_spmm_stages

KEY_COLUMNS = ("matrix", "n_rows", "nnz", "width")
KINDS = ("spmm", "sddmm")
BEST = "best"
"""The virtual kernel column of a table: per row, the fastest published kernel."""

TABLE_FACTORS = ("stage_overhead_s", "dram_efficiency", "gather_efficiency", "onchip_bw_bytes_per_s",
                 "row_overhead_s", "row_gather_overhead_s", "overlap_exponent", "table_locality")
"""What a table fit adjusts, in this order: `HardwareSpec` fields, and ``table_locality`` (the table's)."""
TABLE_BOUNDS = {
    "stage_overhead_s": (1e-7, 1e-3),  # fixed per-call cost: launch + the kernel's setup
    "dram_efficiency": (1e-3, 1.0),
    "gather_efficiency": (1e-4, 1.0),
    "onchip_bw_bytes_per_s": (1e11, 1e14),  # effective L2 bandwidth seen by the gathers
    "row_overhead_s": (1e-15, 1e-6),  # per output row (aggregate throughput: s per row)
    "row_gather_overhead_s": (1e-16, 1e-8),  # per gathered row / edge
    "overlap_exponent": (1.0, 64.0),
    "table_locality": (1e-4, 1.0),
}
TABLE_X0 = {"stage_overhead_s": 1e-5, "dram_efficiency": 0.7, "gather_efficiency": 0.3,
            "onchip_bw_bytes_per_s": 5e12, "row_overhead_s": 1e-10, "row_gather_overhead_s": 1e-12,
            "overlap_exponent": 4.0, "table_locality": 0.1}
CV_FOLDS = 5
RESIDUALS = ("log", "relative")


@dataclasses.dataclass(frozen=True)
class TimingTable:
    """A device timing table.

    Fields:
      path: the CSV file it was read from.
      kind: "spmm" or "sddmm".
      matrix: str [R] matrix names (the CV groups).
      n_rows, nnz, width: float64 [R].
      times_s: ``{kernel: float64 [R]}`` seconds per call, NaN where blank.
      screened: ``{kernel: int}`` times set to NaN by `screen` (physically impossible).
    """

    path: str
    kind: str
    matrix: np.ndarray
    n_rows: np.ndarray
    nnz: np.ndarray
    width: np.ndarray
    times_s: dict
    screened: dict = dataclasses.field(default_factory=dict)

    @property
    def kernels(self) -> list[str]:
        """The kernel columns, then `BEST` (the fastest kernel per row)."""
        return list(self.times_s) + [BEST]

    def measured(self, kernel: str) -> np.ndarray:
        """Seconds per call of ``kernel`` (`BEST`: the row-wise minimum), NaN where not timed.

        Raises:
          ValueError: unknown kernel (the message lists the table's)."""
        if kernel == BEST:
            stacked = np.stack(list(self.times_s.values()), axis=1)
            ok = np.isfinite(stacked).any(axis=1)
            return np.where(ok, np.nanmin(np.where(np.isfinite(stacked), stacked, np.inf), axis=1), np.nan)
        if kernel not in self.times_s:
            raise ValueError(f"{self.path}: no kernel column {kernel!r}; kernels: {', '.join(self.kernels)}")
        return self.times_s[kernel]


def read_timing_table(path, kind: Optional[str] = None) -> TimingTable:
    """Reads and checks a timing table (module docstring).

    Args:
      path: CSV file.
      kind: "spmm" or "sddmm"; default from the file name ("sddmm" in it, else "spmm").

    Raises:
      FileNotFoundError: no such file.
      ValueError: one line naming the file, and the row (1-based, header = row 1) and column
        where a key column is missing, a count is not a number, ``n_rows`` / ``width`` < 1,
        ``nnz`` < 0, a time is not a number or not > 0, or the table has no kernel column or no row.
    """
    path = str(path)
    if kind is None:
        kind = "sddmm" if "sddmm" in Path(path).name.lower() else "spmm"
    if kind not in KINDS:
        raise ValueError(f"{path}: kind must be one of {KINDS}, got {kind!r}")
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        for col in KEY_COLUMNS:
            if col not in header:
                raise ValueError(f"{path}: row 1: missing column {col!r} (columns: {', '.join(header)})")
        kernels = [c[:-3] for c in header if c.endswith("_ms")]
        if not kernels:
            raise ValueError(f"{path}: row 1: no kernel column (<kernel>_ms)")
        names, counts, times = [], [], []
        for i, row in enumerate(reader, start=2):
            names.append(row["matrix"])
            vals = []
            for col, lo in (("n_rows", 1.0), ("nnz", 0.0), ("width", 1.0)):
                v = _number(row.get(col), path, i, col)
                if v is None or v < lo:
                    raise ValueError(f"{path}: row {i}, column {col!r}: must be a number >= {lo:g}, "
                                     f"got {row.get(col)!r}")
                vals.append(v)
            counts.append(vals)
            t = []
            for k in kernels:
                v = _number(row.get(f"{k}_ms"), path, i, f"{k}_ms")
                if v is not None and not v > 0:
                    raise ValueError(f"{path}: row {i}, column {k + '_ms'!r}: a time must be > 0, got {v!r}")
                t.append(np.nan if v is None else v * 1e-3)
            times.append(t)
    if not names:
        raise ValueError(f"{path}: no rows")
    c, t = np.asarray(counts, np.float64), np.asarray(times, np.float64)
    return TimingTable(path, kind, np.asarray(names), c[:, 0], c[:, 1], c[:, 2],
                       {k: t[:, j] for j, k in enumerate(kernels)})


SCREEN_BANDWIDTH_FACTOR = 10.0
"""`screen` drops a time shorter than the kernel's compulsory bytes moved at this many times the
device's DRAM peak (an L2-resident operand may beat DRAM, not by 10x over the whole compulsory set)."""


def screen(table: TimingTable, hw: HardwareSpec) -> TimingTable:
    """``table`` with physically impossible times set to NaN: a call faster than its compulsory
    bytes (`table_stage`) at `SCREEN_BANDWIDTH_FACTOR` x ``hw``'s DRAM peak (a failed run recorded
    as a time; docs/hwmodel.md says which the public H100 tables hold). The
    count per kernel is in ``screened``; nothing else is changed (slow outliers are kept)."""
    floor = np.asarray(jax.vmap(lambda n, e, w: table_stage(table.kind, n, e, w).compulsory_bytes)(
        *(jnp.asarray(a, jnp.float32) for a in (table.n_rows, table.nnz, table.width))), np.float64)
    floor = floor / (SCREEN_BANDWIDTH_FACTOR * hw.dram_bw_bytes_per_s)
    times, screened = {}, {}
    for k, t in table.times_s.items():
        bad = np.isfinite(t) & (t < floor)
        times[k] = np.where(bad, np.nan, t)
        screened[k] = int(bad.sum())
    return dataclasses.replace(table, times_s=times, screened=screened)


def _number(text, path: str, row: int, col: str) -> Optional[float]:
    """A cell as a finite float, None if blank."""
    if text is None or str(text).strip() == "":
        return None
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"{path}: row {row}, column {col!r}: not a number: {text!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{path}: row {row}, column {col!r}: not a finite number: {text!r}")
    return v


def sddmm_stage(n_rows, nnz, width, x_bits=32.0) -> Stage:
    """SDDMM ``out[e] = <Q[row(e)], K[col(e)]>`` over ``nnz`` stored nonzeros, rows of ``width``
    (the edge-value gradient of an SpMM; attention scores): ``nnz * width`` MACs; reads the
    structure (row pointers, column ids) and Q, K once, writes one fp32 value per nonzero
    (compulsory); every nonzero beyond the first per row re-gathers a K row (``reuse_bytes``,
    hit on chip by the capacity model), one gathered row per nonzero.

    Shapes: counts are scalars; returns a "sddmm" `Stage`."""
    n, e, w = (jnp.asarray(v, jnp.float32) for v in (n_rows, nnz, width))
    row = w * x_bits / 8.0
    structure = (n + 1.0) * INDEX_BYTES + e * INDEX_BYTES
    compulsory = structure + 2.0 * n * row + e * VALUE_BYTES
    reuse = jnp.maximum(e - n, 0.0) * row
    return Stage("sddmm", e * w, jnp.asarray(x_bits, jnp.float32), compulsory, reuse, n * row, n,
                 gathered_rows=e, output_rows=n)


def table_stage(kind: str, n_rows, nnz, width, table_locality=1.0) -> Stage:
    """The `Stage` of one table row (fp32): SpMM as the CSR kernel (`csr_chunk_spmm_stages`, with
    edge values, 32-byte sectors, and the ``n_rows`` output rows each paying ``row_overhead_s``),
    SDDMM as `sddmm_stage`. ``table_locality`` in (0, 1] scales the rows the re-references fall
    among (working set rows and bytes; 1 = uniform re-reference over all rows)."""
    if kind == "spmm":
        s = csr_chunk_spmm_stages(n_rows, nnz, width, 32.0, 32.0)[0]
        s = dataclasses.replace(s, output_rows=jnp.asarray(n_rows, jnp.float32))
    elif kind == "sddmm":
        s = sddmm_stage(n_rows, nnz, width)
    else:
        raise ValueError(f"table_stage(kind): must be one of {KINDS}, got {kind!r}")
    return dataclasses.replace(s, working_set_bytes=s.working_set_bytes * table_locality,
                               working_set_rows=s.working_set_rows * table_locality)


def with_factors(hw: HardwareSpec, factors: dict) -> HardwareSpec:
    """``hw`` with the `HardwareSpec` fields of ``factors`` replaced (``table_locality`` ignored)."""
    return dataclasses.replace(hw, **{k: v for k, v in factors.items() if k != "table_locality"})


def predict(table: TimingTable, hw: HardwareSpec, table_locality=1.0) -> jax.Array:
    """Modeled seconds per call [R] of the table's rows on ``hw`` (float32)."""
    n, e, w = (jnp.asarray(a, jnp.float32) for a in (table.n_rows, table.nnz, table.width))
    one = lambda ni, ei, wi: stage_cost(table_stage(table.kind, ni, ei, wi, table_locality), hw).latency_s
    return jax.vmap(one)(n, e, w)


def latency_model(table: TimingTable, base: HardwareSpec):
    """A jitted ``theta [len(TABLE_FACTORS)] -> modeled seconds [R]`` for the table's rows on
    ``base`` with the factors ``theta`` (order of `TABLE_FACTORS`)."""
    return jax.jit(lambda theta: predict(table, with_factors(base, dict(zip(TABLE_FACTORS[:-1], theta[:-1]))),
                                         theta[-1]))


def fit_factors(model, measured: np.ndarray, idx: np.ndarray, fixed: Optional[dict] = None,
                residual: str = "log") -> dict:
    """Fits `TABLE_FACTORS` on the rows ``idx`` (module docstring: robust least squares on
    ``residual``, one of `RESIDUALS`); the factors in ``fixed`` keep their given values.

    Returns: ``{factor: float}``.

    Raises:
      ValueError: ``residual`` is not one of `RESIDUALS`."""
    if residual not in RESIDUALS:
        raise ValueError(f"fit_factors(residual): must be one of {RESIDUALS}, got {residual!r}")
    fixed = dict(fixed or {})
    x0 = {**TABLE_X0, **fixed}
    lo = np.log([TABLE_BOUNDS[k][0] for k in TABLE_FACTORS])
    hi = np.log([TABLE_BOUNDS[k][1] for k in TABLE_FACTORS])
    u0 = np.log([x0[k] for k in TABLE_FACTORS])
    u0 = np.where([k in fixed for k in TABLE_FACTORS], u0, np.clip(u0, lo, hi))
    free = np.array([k not in fixed for k in TABLE_FACTORS])
    y = measured[idx]

    def full(u):
        v = u0.copy()
        v[free] = u
        return v

    def resid(u):
        ratio = np.asarray(model(jnp.asarray(np.exp(full(u)), jnp.float32)), np.float64)[idx] / y
        return np.log(ratio) if residual == "log" else ratio - 1.0

    res = scipy.optimize.least_squares(resid, u0[free], bounds=(lo[free], hi[free]), diff_step=1e-3, loss=FIT_LOSS,
                                       f_scale=FIT_SCALE)
    return dict(zip(TABLE_FACTORS, np.exp(full(res.x)).tolist()))


def _theta(factors: dict) -> jax.Array:
    return jnp.asarray([factors[k] for k in TABLE_FACTORS], jnp.float32)


def grouped_cv(table: TimingTable, kernel: str, base: HardwareSpec, folds: int = CV_FOLDS,
               fixed: Optional[dict] = None, residual: str = "log") -> np.ndarray:
    """Held-out predictions [R] of ``kernel``: ``folds``-fold cross-validation grouped by matrix
    (scikit-learn ``GroupKFold``), each fold predicted by a fit on the others (NaN: not timed)."""
    from sklearn.model_selection import GroupKFold
    measured = table.measured(kernel)
    ok = np.flatnonzero(np.isfinite(measured))
    pred = np.full(measured.shape, np.nan)
    model = latency_model(table, base)
    n_groups = len(set(table.matrix[ok].tolist()))
    for train, test in GroupKFold(min(folds, n_groups)).split(ok, groups=table.matrix[ok]):
        fac = fit_factors(model, measured, ok[train], fixed, residual)
        pred[ok[test]] = np.asarray(model(_theta(fac)))[ok[test]]
    return pred


def by_width(table: TimingTable, pred: np.ndarray, measured: np.ndarray) -> dict:
    """`metrics` per width (``{"<width>": {...}}``) and over all rows (``"all"``)."""
    out = {str(int(w)): metrics(pred[table.width == w], measured[table.width == w]) for w in np.unique(table.width)}
    out["all"] = metrics(pred, measured)
    return out


def fit_table(table: TimingTable, base: HardwareSpec, kernels: Optional[Sequence[str]] = None,
              cv: bool = True, fixed: Optional[dict] = None, residuals: Sequence[str] = ("log",)) -> dict:
    """Per kernel column (default: every column and `BEST`): the factors fitted on all its rows
    and, with ``cv``, the grouped cross-validation metrics per width. With several ``residuals``
    (and ``cv``), each is cross-validated and the one with the lowest grouped-CV MAPE over all rows
    is kept (a choice made on the same folds it is reported on: two candidates, so the optimism is
    small but not zero; ``cv_by_residual`` keeps every candidate's result).

    Returns: ``{kernel: {"residual", "factors": {...}, "cv": {width: metrics},
    "cv_by_residual": {residual: metrics over all rows}}}`` (no ``cv`` keys without ``cv``)."""
    model = latency_model(table, base)
    out = {}
    for k in (kernels or table.kernels):
        measured = table.measured(k)
        ok = np.flatnonzero(np.isfinite(measured))
        if ok.size < 3:
            continue
        entry = {"residual": residuals[0]}
        if cv:
            per = {r: by_width(table, grouped_cv(table, k, base, fixed=fixed, residual=r), measured) for r in residuals}
            entry["residual"] = min(per, key=lambda r: per[r]["all"]["mape"])
            entry["cv"] = per[entry["residual"]]
            entry["cv_by_residual"] = {r: m["all"] for r, m in per.items()}
        entry["factors"] = fit_factors(model, measured, ok, fixed, entry["residual"])
        out[k] = entry
    return out


def validate_table(table: TimingTable, hw: HardwareSpec, kernel_factors: Optional[dict] = None) -> dict:
    """The error of ``hw`` on every kernel column of ``table`` (no fitting): per column, ``hw``
    with that kernel's fitted factors (``kernel_factors[kernel]``, e.g. a fit record's
    ``tables[kind]``) where given, else ``hw`` as it is with uniform re-reference.

    Returns: ``{"table", "kind", "hw", "kernels": {kernel: {"factors_from", "by_width": {width: metrics},
    "rows": [{"matrix", "n_rows", "nnz", "width", "measured_s", "modeled_s"}]}}}``."""
    out = {"table": table.path, "kind": table.kind, "hw": hw.name, "kernels": {}}
    for k in table.kernels:
        measured = table.measured(k)
        fac = (kernel_factors or {}).get(k)
        spec = hw if fac is None else with_factors(hw, fac)
        pred = np.asarray(predict(table, spec, 1.0 if fac is None else fac["table_locality"]), np.float64)
        rows = [{"matrix": str(m), "n_rows": int(n), "nnz": int(e), "width": int(w),
                 "measured_s": None if not np.isfinite(t) else float(t), "modeled_s": float(p)}
                for m, n, e, w, t, p in zip(table.matrix, table.n_rows, table.nnz, table.width, measured, pred)]
        out["kernels"][k] = {"factors_from": "preset" if fac is None else "fit",
                             "by_width": by_width(table, pred, measured), "rows": rows}
    return out
