"""Where the energy goes: stacked modeled-energy breakdowns of dense, INT8 and co-designed models.

Usage (from the repository root)::

    python paper_figures/breakdown.py results/cora_tradeoff.jsonl [--out DIR] [--loss-pts 1.0]

Reads the tradeoff JSONL (format: `paper_figures.fronts`; records need ``breakdown`` =
``CostReport.breakdown(hw)``). Per (dataset, model), one figure with a column per hardware and
four bars per panel (`paper_figures.fronts.representatives`): the dense FP32 model, INT8, the
co-design-family point with the largest energy reduction within ``--loss-pts`` of dense accuracy,
and the UGS+INT8 point of closest energy. Top row: energy split into compute (MACs), DRAM,
on-chip SRAM and near-memory (internal accesses + host link); bottom row: energy per stage
(``layer/kind``). Bars are normalized to the dense model's energy on that hardware. Writes
``<out>/<stem>_<model>_breakdown.png`` and ``.pdf``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

import numpy as np

if __package__ in (None, ""):  # run as a script: make `paper_figures` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paper_figures import fronts  # noqa: E402
from paper_figures.common import DPI, dedupe_legend, new_figure, save_panel_figure  # noqa: E402

__all__ = ["UNIT_PARTS", "bars", "draw", "main"]

# (label, breakdown fields summed, colour)
UNIT_PARTS = (("compute (MACs)", ("compute_j",), "C1"), ("DRAM", ("dram_j",), "C0"),
              ("on-chip SRAM", ("onchip_j",), "C2"), ("near-memory + link", ("nmp_j", "link_j"), "C4"))
_BAR_LABELS = {"dense": "dense\nFP32", "int8": "INT8", "codesign": "co-design", "ugs_int8": "UGS\n+INT8"}


def bars(points: Sequence[dict], loss_pts: float = 1.0) -> tuple[list[dict], list[str]]:
    """The bars of one panel (one dataset, model, hw).

    Args:
        points: that panel's points from `paper_figures.fronts.load_tradeoff`.
        loss_pts: accuracy loss (percentage points) allowed for the co-design pick.

    Returns:
        ``(bars, notes)``: each bar ``{"name", "label", "point", "breakdown", "energy_j"}`` (the
        dense bar uses the dense point's ``breakdown``, else any point's ``dense_breakdown``;
        ``energy_j`` is the sum of the stages' ``energy_j``), and notes on bars left out (no such
        point, or no breakdown recorded).
    """
    reps = fronts.representatives(points, loss_pts)
    out, notes = [], []
    for name, p in reps.items():
        bd = None if p is None else p["breakdown"]
        if name == "dense" and bd is None:
            bd = next((q["dense_breakdown"] for q in points if q["dense_breakdown"] is not None), None)
        if bd is None:
            why = ("no point" if p is None and name != "codesign" else
                   f"no point within {loss_pts:g} pt of dense accuracy" if p is None else "no breakdown recorded")
            notes.append(f"{name}: {why}")
            continue
        label = _BAR_LABELS[name]
        if p is not None:
            label += f"\n{p['acc_pct']:.1f}%"
        out.append({"name": name, "label": label, "point": p, "breakdown": bd,
                    "energy_j": float(sum(s["energy_j"] for s in bd.values()))})
    return out, notes


def _panel(ax_unit, ax_stage, panel_bars: list[dict], stage_colors: dict) -> None:
    ref = next((b["energy_j"] for b in panel_bars if b["name"] == "dense"), None)
    if ref is None:  # no dense bar: normalize to the largest bar
        ref = max(b["energy_j"] for b in panel_bars)
    x = np.arange(len(panel_bars))
    bottom = np.zeros(len(panel_bars))
    for label, fields, color in UNIT_PARTS:
        h = np.array([sum(s[f] for s in b["breakdown"].values() for f in fields) for b in panel_bars]) / ref
        ax_unit.bar(x, h, bottom=bottom, color=color, label=label, width=0.7)
        bottom += h
    for xi, b, top in zip(x, panel_bars, bottom):
        txt = "1.0" if b["name"] == "dense" else f"{ref / b['energy_j']:.1f}× lower"
        ax_unit.annotate(txt, (xi, top), ha="center", va="bottom", fontsize=7, xytext=(0, 2),
                         textcoords="offset points")
    bottom = np.zeros(len(panel_bars))
    for stage, color in stage_colors.items():
        h = np.array([b["breakdown"].get(stage, {"energy_j": 0.0})["energy_j"] for b in panel_bars]) / ref
        if h.any():
            ax_stage.bar(x, h, bottom=bottom, color=color, label=stage, width=0.7)
            bottom += h
    for ax in (ax_unit, ax_stage):
        ax.set_xticks(x, [b["label"] for b in panel_bars], fontsize=7)
        ax.set_ylim(0, 1.15 * max(bottom.max(), 1e-12))
        ax.grid(True, axis="y", alpha=0.25)


def draw(points: Sequence[dict], out: Path, stem: str, loss_pts: float = 1.0,
         dpi: int = DPI) -> tuple[list[Path], list[str]]:
    """Draw the breakdown figure of every (dataset, model) in ``points``.

    Args:
        points: from `paper_figures.fronts.load_tradeoff`.
        out: output folder (created).
        stem: file name prefix.
        loss_pts: accuracy loss allowed for the co-design pick (percentage points).
        dpi: PNG resolution.

    Returns:
        ``(written paths, notes)``; notes say which bars or figures were left out and why.
    """
    by_dm: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for (dataset, model, hw), pts in fronts.panels(points).items():
        by_dm.setdefault((dataset, model), {})[hw] = pts
    several = len({d for d, _ in by_dm}) > 1
    written, notes = [], []
    from matplotlib import colormaps

    for (dataset, model), per_hw in by_dm.items():
        panel_bars = {}
        for hw, pts in per_hw.items():
            b, n = bars(pts, loss_pts)
            notes += [f"{dataset}/{model}/{hw}: {x}" for x in n]
            if b:
                panel_bars[hw] = b
        if not panel_bars:
            notes.append(f"{dataset}/{model}: no breakdown figure (no record has a breakdown)")
            continue
        stages = list(dict.fromkeys(s for bs in panel_bars.values() for b in bs for s in b["breakdown"]))
        cmap = colormaps["tab20"]
        stage_colors = {s: cmap(i % 20) for i, s in enumerate(stages)}
        fig, axes = new_figure(2, len(panel_bars), panel_w_in=3.4, panel_h_in=3.0)
        for j, (hw, bs) in enumerate(panel_bars.items()):
            _panel(axes[0, j], axes[1, j], bs, stage_colors)
            axes[0, j].set_title(hw)
        axes[0, 0].set_ylabel("energy / dense FP32\n(by unit)")
        axes[1, 0].set_ylabel("energy / dense FP32\n(by stage)")
        for row in range(2):
            h, lab = dedupe_legend(*axes[row, 0].get_legend_handles_labels())
            for ax in axes[row, 1:]:
                h2, l2 = ax.get_legend_handles_labels()
                h, lab = dedupe_legend(h + h2, lab + l2)
            fig.legend(h, lab, loc="center left", fontsize=7, frameon=False,
                       bbox_to_anchor=(1.0, 0.75 if row == 0 else 0.28))
        fig.suptitle(f"{dataset} / {model}: modeled energy breakdown (co-design: largest reduction "
                     f"within {loss_pts:g} pt of dense accuracy)", fontsize=9)
        written += save_panel_figure(fig, out, stem, dataset, model, "breakdown", several, dpi)
    return written, notes


def main(argv: Sequence[str] | None = None) -> list[Path]:
    """Command line: see the module docstring (`fronts.tradeoff_figure_main`). Prints the notes
    and the written paths; returns the written PNG and PDF paths.

    Raises:
        SystemExit: naming the file (and line), if the input is missing, malformed or empty.
    """
    return fronts.tradeoff_figure_main(argv, "breakdown.py", __doc__, draw,
                                       "accuracy loss allowed for the co-design bar (percentage points)")

if __name__ == "__main__":
    main()
