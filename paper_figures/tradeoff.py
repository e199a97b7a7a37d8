"""Accuracy vs modeled cost of every method, one panel per hardware target (the paper's Fig. 1).

Usage (from the repository root)::

    python paper_figures/tradeoff.py results/cora_tradeoff.jsonl [--out DIR] [--cost energy,latency]

Reads the tradeoff JSONL (format: `paper_figures.fronts`). Per model, and per cost (modeled
energy, modeled latency, and measured CPU latency where records were measured: ``--cost measured``),
one figure with a panel per hardware: test accuracy (%, mean ± std
over seeds) against cost relative to the dense FP32 model on that hardware (log axis; left is
cheaper), each method a series, the Pareto fronts of the co-design family (codesign, edge_only,
quant_only) and of the baselines (all other methods but dense) as step lines, the dense point
and a "dense - 1 pt" line. The accuracy axis reaches ``--span-pts`` (25) points below dense;
collapsed models below that are arrows on its floor, labelled with their accuracy. Writes ``<out>/<stem>_<model>_<cost>.png`` and ``.pdf`` (``stem``:
the input's file name without ``.jsonl``; ``_<dataset>`` is added after it when the file holds
several datasets).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Sequence

if __package__ in (None, ""):  # run as a script: make `paper_figures` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paper_figures import fronts  # noqa: E402
from paper_figures.common import (DPI, add_common_args, dedupe_legend, legend_right, method_style,  # noqa: E402
                                  new_figure, print_written, save_panel_figure)

__all__ = ["draw", "main"]

DEFAULT_SPAN_PTS = 25.0  # accuracy axis: down to this many points below dense


def _panel(ax, points: list[dict], cost: str, floor_pct: float | None) -> None:
    """One hardware's panel; points below ``floor_pct`` are drawn as arrows on the floor."""
    ratio = fronts.COSTS[cost][2]
    dense = fronts.dense_point(points)
    methods = sorted({p["method"] for p in points}, key=fronts.method_sort_key)
    for m in methods:
        pts = sorted((p for p in points if p["method"] == m and not math.isnan(p["acc_pct"])),
                     key=lambda p: p[ratio])
        if not pts:
            continue
        st = method_style(m)
        filled = fronts.family(m) != "baseline"
        low = [p for p in pts if floor_pct is not None and p["acc_pct"] < floor_pct]
        for k, p in enumerate(low):  # stacked labels: collapsed points often share a cost
            ax.plot(p[ratio], floor_pct, marker="v", ms=6, color=st["color"], ls="none", zorder=4,
                    clip_on=False)
            ax.annotate(f"{p['acc_pct']:.0f}%", (p[ratio], floor_pct), xytext=(0, 5 + 7 * k),
                        textcoords="offset points", ha="center", fontsize=6, color=st["color"])
        pts = [p for p in pts if p not in low]
        if not pts:
            continue
        ax.errorbar([p[ratio] for p in pts], [p["acc_pct"] for p in pts],
                    yerr=[p["acc_pct_std"] for p in pts], ls="none", marker=st["marker"],
                    ms=11 if m == fronts.DENSE_METHOD else 5, color=st["color"],
                    mfc=st["color"] if filled else "none", capsize=2, elinewidth=0.8,
                    label=st["label"], zorder=4 if filled else 3)
    for fam, style in (("codesign", dict(color="C3", ls="-", label="co-design family front")),
                       ("baseline", dict(color="C0", ls="--", label="baseline front"))):
        fr = fronts.front([p for p in points if p["family"] == fam and not math.isnan(p["acc_pct"])], cost)
        if fr:
            ax.step([p[ratio] for p in fr], [p["acc_pct"] for p in fr], where="post", lw=1.3,
                    alpha=0.8, zorder=2, **style)
    if dense is not None:
        ax.axhline(dense["acc_pct"] - 1.0, color="k", ls=":", lw=0.8, label="dense − 1 pt")
    ax.axvline(1.0, color="0.6", lw=0.6, zorder=1)
    ax.set_xscale("log")
    ax.grid(True, which="both", alpha=0.25)


def draw(points: Sequence[dict], cost: str, out: Path, stem: str, dpi: int = DPI,
         span_pts: float = DEFAULT_SPAN_PTS) -> list[Path]:
    """Draw the figures of one cost for all (dataset, model) pairs in ``points``.

    Args:
        points: from `paper_figures.fronts.load_tradeoff`.
        cost: ``"energy"``, ``"latency"`` (modeled) or ``"measured"`` (measured CPU latency: only
            the points with measured runs; nothing is drawn without any).
        out: output folder (created).
        stem: file name prefix.
        dpi: PNG resolution.
        span_pts: the accuracy axis reaches this many percentage points below the best dense
            accuracy of the figure; points below (collapsed models) are drawn as arrows on its
            floor, labelled with their accuracy. ``inf``: no floor.

    Returns:
        The written paths (PNG and PDF per figure).

    Raises:
        KeyError: for an unknown ``cost``.
    """
    words, ratio = fronts.COSTS[cost][3], fronts.COSTS[cost][2]
    points = [p for p in points if p[ratio] is not None]  # "measured": the measured points only
    by_dm: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for (dataset, model, hw), pts in fronts.panels(points).items():
        by_dm.setdefault((dataset, model), {})[hw] = pts
    several = len({d for d, _ in by_dm}) > 1
    written = []
    for (dataset, model), per_hw in by_dm.items():
        fig, axes = new_figure(1, len(per_hw), panel_w_in=3.8, panel_h_in=3.3, sharey=True)
        dense_accs = [d["acc_pct"] for d in map(fronts.dense_point, per_hw.values()) if d is not None]
        accs = [p["acc_pct"] for pts in per_hw.values() for p in pts if not math.isnan(p["acc_pct"])]
        floor = None
        if dense_accs and math.isfinite(span_pts) and min(accs) < max(dense_accs) - span_pts:
            floor = max(dense_accs) - span_pts
        for ax, (hw, pts) in zip(axes[0], per_hw.items()):
            _panel(ax, pts, cost, floor)
            ax.set_title(hw)
            ax.set_xlabel(f"{words} / dense FP32 (log; left = cheaper)", fontsize=8)
        axes[0, 0].set_ylabel("test accuracy (%)")
        if floor is not None:
            axes[0, 0].set_ylim(floor, max(accs) + 2.0)
        handles, labels = [], []
        for ax in axes[0]:
            h, lab = ax.get_legend_handles_labels()
            handles += h
            labels += lab
        handles, labels = dedupe_legend(handles, labels)
        legend_right(fig, handles, labels)
        fig.suptitle(f"{dataset} / {model}: test accuracy vs {words} (mean ± std over seeds)",
                     fontsize=10)
        written += save_panel_figure(fig, out, stem, dataset, model, cost, several, dpi)
    return written


def main(argv: Sequence[str] | None = None) -> list[Path]:
    """Command line: see the module docstring.

    Returns:
        The written PNG and PDF paths.

    Raises:
        SystemExit: naming the file (and line), if the input is missing, malformed or empty.
    """
    parser = argparse.ArgumentParser(prog="tradeoff.py", description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, help="results/<dataset>_tradeoff.jsonl")
    parser.add_argument("--cost", default="energy,latency", help="comma-separated: energy,latency,measured")
    parser.add_argument("--span-pts", type=float, default=DEFAULT_SPAN_PTS,
                        help="accuracy axis reaches this far below dense (points); lower ones are arrows "
                             f"on the floor (default {DEFAULT_SPAN_PTS:g}; inf = all)")
    add_common_args(parser)
    args = parser.parse_args(argv)
    costs = [c for c in args.cost.split(",") if c]
    bad = [c for c in costs if c not in fronts.COSTS]
    if bad or not costs:
        parser.error(f"--cost: unknown {bad}; choose from {sorted(fronts.COSTS)}")
    points = fronts.load_or_exit(args.results, "tradeoff.py")
    written = []
    for c in costs:
        written += draw(points, c, args.out, args.results.stem, args.dpi, args.span_pts)
    return print_written(written)


if __name__ == "__main__":
    main()
