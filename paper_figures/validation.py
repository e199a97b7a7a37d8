"""Cost model validation: modeled vs measured stage latency (log-log scatter, one panel per file).

Usage (from the repository root)::

    python paper_figures/validation.py [FILE.json ...] [--results DIR] [--out DIR]

Reads the JSON written by ``experiments/hwmodel_validation.py`` (without FILE arguments:
``<results>/hwmodel_validation_*.json`` and ``<results>/gpu/hwmodel_validation*.json``, one of
``X.json`` / ``X_quick.json``, the full one preferred)::

    {"machine": {...}, "fitted": {...}, "held_out": {"mape", "spearman", "n"}, ...,
     "points": [{"kind": "gemm"|"spmm"|..., "measured_s": float, "modeled_s": float,
                 "split": "train"|"test"|"excluded", ...}, ...]}

Each point is drawn at (measured, modeled) seconds, coloured by stage kind; held-out ("test")
points filled, calibration ("train") points hollow; the y = x line and a x2 band. The panel
title gives MAPE (mean |modeled - measured| / measured) and Spearman rank correlation of the
held-out points, computed from the points. Writes ``<out>/hwmodel_validation.png`` and ``.pdf``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

if __package__ in (None, ""):  # run as a script: make `paper_figures` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paper_figures.common import (DPI, dedupe_legend, find_results, is_quick, json_results_main,  # noqa: E402
                                  legend_right, load_json_object, new_figure, save_figure)

__all__ = ["find_inputs", "load_points", "metrics", "draw", "main"]

KIND_COLORS = {"gemm": "C1", "spmm": "C0", "bsr": "C5", "sddmm": "C2"}


def find_inputs(results: Path, quick: bool = False) -> list[Path]:
    """``results/hwmodel_validation_*.json`` and ``results/gpu/hwmodel_validation*.json``, one
    per result (the ``_quick`` one only when ``quick`` or when it has no full partner)."""
    return find_results(results, "hwmodel_validation", quick)


def load_points(path: Path) -> list[dict]:
    """The validation points of one file, checked.

    Returns:
        ``[{"kind": str, "measured_s": float, "modeled_s": float, "held_out": bool}]``.

    Raises:
        ValueError: naming the file and the point index, if the file is not a JSON object with a
            non-empty ``points`` list of objects with positive finite ``measured_s``/``modeled_s``
            and ``split`` ``"train"``, ``"test"`` or ``"excluded"`` (a kind never fitted,
            ``--exclude-kinds``: drawn as held out).
    """
    obj = load_json_object(path)
    raw = obj.get("points")
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{path}: expected a non-empty 'points' list")
    out = []
    for i, p in enumerate(raw):
        where = f"{path}: points[{i}]"
        if not isinstance(p, dict):
            raise ValueError(f"{where}: expected an object, got {p!r}")
        row = {"kind": str(p.get("kind", "?"))}
        for f in ("measured_s", "modeled_s"):
            v = p.get(f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{where}: field {f!r} must be a positive number, got {v!r}")
            row[f] = float(v)
        if p.get("split") not in ("train", "test", "excluded"):
            raise ValueError(f"{where}: field 'split' must be 'train', 'test' or 'excluded', got {p.get('split')!r}")
        row["held_out"] = p["split"] != "train"
        out.append(row)
    return out


def metrics(modeled: Sequence[float], measured: Sequence[float]) -> dict:
    """``{"mape", "spearman", "n"}``: mean absolute percentage error (a fraction) and Spearman
    rank correlation of modeled against measured values (NaN for fewer than 2 points)."""
    import scipy.stats

    mod, mea = np.asarray(modeled, float), np.asarray(measured, float)
    n = len(mod)
    mape = float(np.mean(np.abs(mod - mea) / mea)) if n else math.nan
    rho = float(scipy.stats.spearmanr(mod, mea).statistic) if n >= 2 else math.nan
    return {"mape": mape, "spearman": rho, "n": n}


def _base(path: Path) -> str:
    return path.stem[: -len("_quick")] if is_quick(path) else path.stem


def _label(path: Path) -> str:
    name = _base(path).replace("hwmodel_validation", "").strip("_") or path.parent.name
    if path.parent.name == "gpu" and "gpu" not in name:
        name = f"gpu {name}".strip()
    return name + (" (quick run)" if is_quick(path) else "")


def draw(files: Sequence[Path], out: Path, dpi: int = DPI) -> list[Path]:
    """Draw one panel per validation file into ``<out>/hwmodel_validation.{png,pdf}``.

    Raises:
        ValueError: as `load_points`; if ``files`` is empty.
    """
    if not files:
        raise ValueError("validation: no input files")
    data = [(Path(f), load_points(Path(f))) for f in files]
    fig, axes = new_figure(1, len(data), panel_w_in=3.8, panel_h_in=3.6)
    for ax, (path, pts) in zip(axes[0], data):
        mea = np.array([p["measured_s"] for p in pts])
        mod = np.array([p["modeled_s"] for p in pts])
        held = np.array([p["held_out"] for p in pts])
        kinds = [p["kind"] for p in pts]
        for kind in dict.fromkeys(kinds):
            c = KIND_COLORS.get(kind, "C7")
            sel = np.array([k == kind for k in kinds])
            ax.plot(mea[sel & ~held], mod[sel & ~held], "o", ms=4, mfc="none", color=c, alpha=0.7,
                    label=f"{kind}, calibration")
            ax.plot(mea[sel & held], mod[sel & held], "o", ms=4, color=c, alpha=0.85,
                    label=f"{kind}, held out")
        lo = min(mea.min(), mod.min()) / 1.5
        hi = max(mea.max(), mod.max()) * 1.5
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="modeled = measured")
        ax.fill_between([lo, hi], [lo / 2, hi / 2], [lo * 2, hi * 2], color="0.5", alpha=0.12, lw=0,
                        label="within 2x")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_aspect("equal")
        m = metrics(mod[held], mea[held])
        ax.set_title(f"{_label(path)}\nheld-out MAPE {100 * m['mape']:.1f} %, Spearman ρ "
                     f"{m['spearman']:.3f} (n={m['n']})", fontsize=8)
        ax.set_xlabel("measured latency (s)")
        ax.grid(True, which="major", alpha=0.25)
    axes[0, 0].set_ylabel("modeled latency (s)")
    h, lab = [], []
    for ax in axes[0]:
        h2, l2 = ax.get_legend_handles_labels()
        h, lab = dedupe_legend(h + h2, lab + l2)
    legend_right(fig, h, lab)
    fig.suptitle("cost model validation: modeled vs measured stage latency", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, out, "hwmodel_validation", dpi)


def main(argv: Sequence[str] | None = None) -> list[Path]:
    """Command line: see the module docstring (`common.json_results_main`). Prints the written
    paths and returns them.

    Raises:
        SystemExit: if no input file is found, or one is missing or malformed (naming it).
    """
    return json_results_main(argv, "validation.py", __doc__, "hwmodel_validation",
                             lambda files, out, dpi: (draw(files, out, dpi), []))

if __name__ == "__main__":
    main()
