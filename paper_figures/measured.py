"""Realized savings: measured next to modeled, per design point (``codesign sweep --measure``).

Input: every ``results/*_measured.jsonl`` (records with ``measured``, ``dense_measured``,
``modeled_local`` and ``dense_modeled_local``, `codesign.deploy.measure_model`). Per dataset one
figure of three panels:

1. test accuracy vs *measured* speedup of the compact program over the dense FP32 program (median
   latency ratio on the machine that measured);
2. test accuracy vs *modeled* energy reduction on the training target (``dense_modeled`` /
   ``modeled``, the sweep's ``--hw``);
3. modeled vs measured latency of every program (compact and dense, log-log, the y = x line),
   with Spearman's rank correlation and the mean absolute percentage error in the title.

Output: ``<out>/<dataset>_measured.{png,pdf}``; `agreement` returns the numbers of panel 3.

    python paper_figures/measured.py [--results results] [--out paper_figures/out]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paper_figures.common import DEFAULT_OUT, DEFAULT_RESULTS, DPI, new_figure, save_figure  # noqa: E402

__all__ = ["find_inputs", "load_points", "agreement", "draw", "main"]

_FIELDS = ("measured", "dense_measured", "modeled_local", "dense_modeled_local")


def find_inputs(results: Path) -> list[Path]:
    """The ``*_measured.jsonl`` files under ``results`` (``_quick`` files excluded)."""
    return sorted(p for p in Path(results).glob("*_measured.jsonl") if not p.stem.endswith("_quick"))


def load_points(paths: Sequence[Path]) -> list[dict]:
    """One dict per measured record (read by `codesign.experiment.load_grid`, the typed loader):
    ``dataset``, ``label`` (method / cost weight / bits), ``accuracy``, ``speedup``,
    ``energy_reduction``, and the four latencies (s) ``measured_s``, ``dense_measured_s``,
    ``modeled_s``, ``dense_modeled_s``.

    Raises:
      ValueError: a record without one of the measured fields (names the file and the record's key),
        or a file whose records disagree on the cost-model or reference version (`load_grid`).
    """
    from codesign.experiment import load_grid

    points = []
    for path in paths:
        for rec in load_grid(path):
            missing = [f for f in _FIELDS + ("speedup",) if f not in rec.extra]
            if missing:
                raise ValueError(f"{path}: record {rec.key!r} has no {missing} (not written by codesign sweep "
                                 f"--measure)")
            cfg, ex = rec.config, rec.extra
            dense = not cfg.get("bits") and not cfg.get("cost_weight")
            label = "dense FP32" if dense else f"{rec.method or 'sweep'} cw {cfg.get('cost_weight', 0):g}"
            points.append({
                "dataset": rec.dataset, "label": label,
                "accuracy": rec.test_accuracy, "speedup": float(ex["speedup"]),
                "energy_reduction": rec.reduction("energy_j"),
                "measured_s": float(ex["measured"]["latency_s"]),
                "dense_measured_s": float(ex["dense_measured"]["latency_s"]),
                "modeled_s": float(ex["modeled_local"]["latency_s"]),
                "dense_modeled_s": float(ex["dense_modeled_local"]["latency_s"])})
    return points


def agreement(points: Sequence[dict]) -> dict:
    """Modeled vs measured latency over the distinct programs of ``points`` (each compact program,
    and each dense program once per dataset): ``{"n", "spearman", "mape", "median_ratio"}``
    (``median_ratio`` = median of modeled / measured); NaN where fewer than 2 programs."""
    import numpy as np
    from scipy.stats import spearmanr

    pairs = [(p["modeled_s"], p["measured_s"]) for p in points]
    seen = set()
    for p in points:  # the dense program of a dataset counts once (its median over the records)
        if p["dataset"] not in seen:
            seen.add(p["dataset"])
            dense = [q for q in points if q["dataset"] == p["dataset"]]
            pairs.append((p["dense_modeled_s"], float(np.median([q["dense_measured_s"] for q in dense]))))
    modeled, measured = np.array(pairs).T if pairs else (np.array([]), np.array([]))
    if len(pairs) < 2:
        return {"n": len(pairs), "spearman": float("nan"), "mape": float("nan"), "median_ratio": float("nan")}
    return {"n": len(pairs), "spearman": float(spearmanr(modeled, measured).statistic),
            "mape": float(np.mean(np.abs(modeled - measured) / measured)),
            "median_ratio": float(np.median(modeled / measured))}


def _log_ticks(axis) -> None:
    """Labels at 1, 2, 5 x 10^k on a log axis, plain numbers, no minor labels."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FormatStrFormatter("%g"))
    axis.set_minor_formatter(NullFormatter())


def draw(points: Sequence[dict], out: Path, dataset: str, dpi: int = DPI) -> list[Path]:
    """The three panels of ``dataset``'s points (module docstring); returns the written files."""
    pts = [p for p in points if p["dataset"] == dataset]
    fig, axes = new_figure(1, 3)
    ax1, ax2, ax3 = axes[0]
    for ax, key, xlabel in ((ax1, "speedup", "measured speedup over dense FP32 (x)"),
                            (ax2, "energy_reduction", "modeled energy reduction (x)")):
        for label in sorted({p["label"] for p in pts}):
            sel = [p for p in pts if p["label"] == label]
            ax.scatter([p[key] for p in sel], [100 * p["accuracy"] for p in sel], s=18, label=label)
        ax.set_xscale("log")
        _log_ticks(ax.xaxis)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("test accuracy (%)")
        ax.grid(True, alpha=0.3)
    ax1.legend(fontsize=6)
    agree = agreement(pts)
    ax3.scatter([1e3 * p["measured_s"] for p in pts], [1e3 * p["modeled_s"] for p in pts], s=18, label="compact")
    ax3.scatter([1e3 * p["dense_measured_s"] for p in pts], [1e3 * p["dense_modeled_s"] for p in pts], s=18,
                marker="x", label="dense FP32")
    keys = ("measured_s", "modeled_s", "dense_measured_s", "dense_modeled_s")
    vals = [1e3 * p[k] for p in pts for k in keys]
    lo, hi = min(vals) / 2, max(vals) * 2
    ax3.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="y = x")
    ax3.set_xscale("log")
    ax3.set_yscale("log")
    for axis in (ax3.xaxis, ax3.yaxis):
        _log_ticks(axis)
    ax3.set_xlabel("measured latency (ms)")
    ax3.set_ylabel("modeled latency, cpu preset (ms)")
    ax3.set_title(f"Spearman {agree['spearman']:.2f}, MAPE {100 * agree['mape']:.0f} % (n={agree['n']})", fontsize=8)
    ax3.legend(fontsize=6)
    fig.suptitle(f"{dataset}: realized (measured) vs modeled savings", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, out, f"{dataset}_measured", dpi)


def main(argv: Sequence[str] | None = None) -> list[Path]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="folder of *_measured.jsonl")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="figure folder")
    args = p.parse_args(argv)
    files = find_inputs(args.results)
    if not files:
        raise SystemExit(f"measured: no {args.results}/*_measured.jsonl (codesign sweep --measure writes them)")
    points = load_points(files)
    written = []
    for dataset in sorted({p["dataset"] for p in points}):
        written += draw(points, args.out, dataset)
        a = agreement([p for p in points if p["dataset"] == dataset])
        print(f"{dataset}: {a['n']} programs, Spearman {a['spearman']:.3f}, MAPE {100 * a['mape']:.1f} %, "
              f"median modeled/measured {a['median_ratio']:.3g}")
    a = agreement(points)
    print(f"all: {a['n']} programs, Spearman {a['spearman']:.3f}, MAPE {100 * a['mape']:.1f} %")
    for w in written:
        print(w)
    return written


if __name__ == "__main__":
    main()
