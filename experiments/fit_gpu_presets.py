"""Fit the `h100` preset's software factors on the public H100 timing tables (thin driver
over `codesign.hwmodel.tables`) and write ``codesign/hwmodel/fits/h100.json``.

    python experiments/fit_gpu_presets.py                      # tables from $CODESIGN_DATA/gpu_timings
    python experiments/fit_gpu_presets.py --dir DIR --no-save  # report only

Per table (SpMM, SDDMM) and kernel column (and `tables.BEST`, the fastest kernel per row): the
factors fitted on every row, and 5-fold cross-validation grouped by matrix (MAPE, Spearman,
median modeled / measured, per width), fitted on log and on relative residuals with the one of
lower grouped-CV MAPE kept (`tables.fit_table`). ``dram_efficiency`` is held at `STREAM_DRAM_EFFICIENCY`
(an ASSUMPTION, `codesign.hwmodel.presets.ASSUMPTIONS`), so that the one factor every stage
shares (GEMMs and elementwise stages stream DRAM too) is not bent by the gathers. The preset
takes the cuSPARSE SpMM factors (`PRESET_KERNEL`): the library JAX lowers a BCOO SpMM to on
GPUs (``jax_bcoo_cusparse_lowering``). The record (factors and grouped-CV metrics per kernel
column and width, no per-row predictions) is the result: docs/hwmodel.md shows it.
"""

from __future__ import annotations

import argparse
import datetime
import os
from pathlib import Path

from codesign.hwmodel import presets, tables
from codesign.results import write_json_atomic

PRESET_KERNEL = ("spmm", "cusparse")
TABLES = {"spmm": "h100_spmm_fp32.csv", "sddmm": "h100_sddmm_fp32.csv"}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=os.path.join(os.environ.get("CODESIGN_DATA", "../shared/data"), "gpu_timings"))
    ap.add_argument("--no-save", action="store_true", help="print only; write nothing")
    args = ap.parse_args(argv)
    base = presets.h100_datasheet()
    fixed = {"dram_efficiency": presets.STREAM_DRAM_EFFICIENCY}
    per_table = {}
    for kind, name in TABLES.items():
        table = tables.screen(tables.read_timing_table(Path(args.dir) / name, kind), base)
        fits = tables.fit_table(table, base, fixed=fixed, residuals=tables.RESIDUALS)
        per_table[kind] = {"source": name, "screened": table.screened, "kernels": fits}
        for k, v in fits.items():
            cv = v["cv"]["all"]
            rho = "-" if cv["spearman"] is None else f"{cv['spearman']:.3f}"
            print(f"{kind:5s} {k:9s} n={cv['n']:4d} grouped-CV MAPE {cv['mape']:.3f} Spearman {rho} "
                  f"({v['residual']} residual)")
    rec = {
        "what": "the `h100` preset's software factors fitted on public device timings "
                "(codesign.hwmodel.presets.h100_fitted)",
        "source": "FlashSparse (Li et al., PPoPP 2025), zli96/flashSparse result/ref/baseline_h100_*.csv, the half "
                  "in shared/data/gpu_timings",
        "fitted_date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "fixed": fixed, "preset_kernel": list(PRESET_KERNEL), "tables": per_table,
        "command": "python experiments/fit_gpu_presets.py",
    }
    if not args.no_save:
        write_json_atomic(presets.FITS_DIR / "h100.json", rec)
    return rec


if __name__ == "__main__":
    main()
