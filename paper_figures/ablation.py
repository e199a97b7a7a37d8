"""What each ingredient of the flagship buys: ``codesign`` against ``codesign_no_*`` (one ingredient dropped).

Usage (from the repository root)::

    python paper_figures/ablation.py results/cora_tradeoff.jsonl [--out DIR] [--dpi N]

Reads the tradeoff JSONL (format: `paper_figures.fronts`). The flagship (`fronts.FLAGSHIP`) and each
ablation method (registry family "ablation": ``codesign_no_edges``, ``codesign_no_features``,
``codesign_no_bits``, ``codesign_no_distill``) are trained at the same cost weights on the same
target, so they are compared at matched cost weights. Per (dataset, model), one figure with two rows
of panels, a column per hardware target: test accuracy (%, mean ± std over seeds) and modeled energy
reduction (dense FP32 energy / energy, log axis) per cost weight, a bar per method. Writes
``<out>/<stem>_<model>_ablation.png`` and ``.pdf`` (``_<dataset>`` after the stem when the file holds
several datasets). `rows` gives the numbers the bars show.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

if __package__ in (None, ""):  # run as a script: make `paper_figures` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paper_figures import fronts  # noqa: E402
from paper_figures.common import (DPI, add_common_args, legend_right, method_style, new_figure,  # noqa: E402
                                  print_written, save_panel_figure)

__all__ = ["rows", "draw", "main"]


def _methods(points: Sequence[dict]) -> list[str]:
    have = {p["method"] for p in points}
    return [fronts.FLAGSHIP] + sorted((m for m in have if fronts.family(m) == "ablation"), key=fronts.method_sort_key)


def rows(points: Sequence[dict]) -> list[dict]:
    """The ablation's numbers: one row per (dataset, model, hw, cost weight, method) among the flagship
    and the ablation methods, for panels that hold the flagship and at least one ablation.

    Returns:
        Dicts with ``dataset``, ``model``, ``hw``, ``cost_weight``, ``method``, ``acc_pct`` /
        ``acc_pct_std`` (test accuracy %, mean and sample std over seeds), ``n_seeds``,
        ``energy_reduction`` (dense FP32 modeled energy / energy on that hardware), and
        ``delta_acc_pts`` / ``energy_vs_flagship`` (accuracy minus the flagship's at the same cost
        weight, in points, and energy reduction / the flagship's; None without a flagship point
        there); ordered by panel, cost weight, then the flagship first.
    """
    out = []
    for (dataset, model, hw), pts in fronts.panels(points).items():
        methods = _methods(pts)
        if fronts.FLAGSHIP not in {p["method"] for p in pts} or len(methods) < 2:
            continue
        sel = [p for p in pts if p["method"] in methods and p["budget"] is None]
        for cw in sorted({p["cost_weight"] for p in sel}):
            at = {p["method"]: p for p in sel if p["cost_weight"] == cw}
            flag = at.get(fronts.FLAGSHIP)
            for m in methods:
                if m not in at:
                    continue
                p = at[m]
                red = 1.0 / p["energy_ratio"]
                out.append({"dataset": dataset, "model": model, "hw": hw, "cost_weight": cw, "method": m,
                            "acc_pct": p["acc_pct"], "acc_pct_std": p["acc_pct_std"], "n_seeds": p["n_seeds"],
                            "energy_reduction": red,
                            "delta_acc_pts": None if flag is None else p["acc_pct"] - flag["acc_pct"],
                            "energy_vs_flagship": None if flag is None else red * flag["energy_ratio"]})
    return out


def draw(points: Sequence[dict], out: Path, stem: str, dpi: int = DPI) -> list[Path]:
    """Draws the ablation figure of every (dataset, model) with rows (`rows`); returns the written paths
    (none when no panel holds the flagship and an ablation)."""
    table = rows(points)
    by_dm: dict[tuple[str, str], list[dict]] = {}
    for r in table:
        by_dm.setdefault((r["dataset"], r["model"]), []).append(r)
    several = len({d for d, _ in by_dm}) > 1
    written = []
    for (dataset, model), rs in by_dm.items():
        hws = list(dict.fromkeys(r["hw"] for r in rs))
        methods = list(dict.fromkeys(r["method"] for r in rs))
        fig, axes = new_figure(2, len(hws), panel_w_in=3.8, panel_h_in=2.6)
        width = 0.8 / len(methods)
        for col, hw in enumerate(hws):
            hr = [r for r in rs if r["hw"] == hw]
            cws = sorted({r["cost_weight"] for r in hr})
            for k, m in enumerate(methods):
                mr = {r["cost_weight"]: r for r in hr if r["method"] == m}
                xs = np.arange(len(cws)) + (k - (len(methods) - 1) / 2) * width
                st = method_style(m)
                acc = [mr[c]["acc_pct"] if c in mr else math.nan for c in cws]
                err = [mr[c]["acc_pct_std"] if c in mr else 0.0 for c in cws]
                red = [mr[c]["energy_reduction"] if c in mr else math.nan for c in cws]
                axes[0, col].bar(xs, acc, width, yerr=err, color=st["color"], label=st["label"], capsize=1.5)
                axes[1, col].bar(xs, red, width, color=st["color"], label=st["label"])
            for row in (0, 1):
                axes[row, col].set_xticks(np.arange(len(cws)), [f"λ={c:g}" for c in cws], fontsize=7)
                axes[row, col].grid(True, axis="y", alpha=0.25)
            accs = [r["acc_pct"] for r in hr if not math.isnan(r["acc_pct"])]
            if accs:
                axes[0, col].set_ylim(max(0.0, min(accs) - 5.0), max(accs) + 2.0)
            axes[1, col].set_yscale("log")
            axes[0, col].set_title(hw)
        axes[0, 0].set_ylabel("test accuracy (%)")
        axes[1, 0].set_ylabel("modeled energy reduction (x)")
        handles, labels = axes[0, 0].get_legend_handles_labels()
        legend_right(fig, handles, labels)
        fig.suptitle(f"{dataset} / {model}: what each ingredient of the flagship buys (same cost weights)",
                     fontsize=10)
        written += save_panel_figure(fig, out, stem, dataset, model, "ablation", several, dpi)
    return written


def main(argv: Sequence[str] | None = None) -> list[Path]:
    """Command line: see the module docstring.

    Raises:
        SystemExit: naming the file (and line), if the input is missing, malformed or empty.
    """
    parser = argparse.ArgumentParser(prog="ablation.py", description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, help="results/<dataset>_tradeoff.jsonl")
    add_common_args(parser)
    args = parser.parse_args(argv)
    points = fronts.load_or_exit(args.results, "ablation.py")
    return print_written(draw(points, args.out, args.results.stem, args.dpi))


if __name__ == "__main__":
    main()
