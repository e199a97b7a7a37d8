"""Roofline of each hardware target with every stage of the dense and co-designed models placed.

Usage (from the repository root)::

    python paper_figures/roofline.py results/cora_tradeoff.jsonl [--out DIR] [--loss-pts 1.0]

Reads the tradeoff JSONL (format: `paper_figures.fronts`; records need ``breakdown``). Per
(dataset, model), one figure with a panel per hardware (`codesign.hwmodel.presets.get`). Each
stage of the dense FP32 model and of the co-design point with the largest energy reduction within
``--loss-pts`` of dense accuracy is a point at

    x = arithmetic intensity = macs / bytes  (MAC per byte of DRAM traffic: ``dram_bytes`` on
        the host, ``nmp_bytes`` (the ranks' internal DRAM traffic) for near-memory stages)
    y = achieved rate = macs / latency_s      (MAC/s)

under the roofs of the spec: ``min(peak, x * bandwidth)`` for the matrix engine and the vector
units at fp32 and at the co-design model's narrowest bit-width (`hwmodel.matrix_macs_per_s`,
`hwmodel.vector_macs_per_s`, times the spec's efficiencies; bandwidth ``dram_bw_bytes_per_s *
dram_efficiency``), and the near-memory roof (``nmp.units`` x per-unit rate and internal
bandwidth) when the spec has near-memory units. Writes ``<out>/<stem>_<model>_roofline.png``/``.pdf``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

if __package__ in (None, ""):  # run as a script: make `paper_figures` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paper_figures import fronts  # noqa: E402
from paper_figures.common import DPI, dedupe_legend, legend_right, new_figure, save_panel_figure  # noqa: E402

__all__ = ["stage_points", "roofs", "draw", "main"]

KIND_COLORS = {"gemm": "C1", "bsr": "C5", "spmm": "C0", "sddmm": "C2", "softmax": "C4",
               "elementwise": "C7"}
_MODEL_MARKERS = {"dense": ("o", "dense FP32"), "codesign": ("^", "co-design")}


def stage_kind(stage: str) -> str:
    """``"layer0/gemm1"`` -> ``"gemm"``: the stage kind without its layer and counter."""
    return re.sub(r"\d+$", "", stage.rsplit("/", 1)[-1])


def stage_points(breakdown: dict) -> list[dict]:
    """Roofline coordinates of each stage of a breakdown (`CostReport.breakdown` format).

    Returns:
        ``[{"stage", "kind", "on_nmp", "intensity_mac_per_byte", "rate_macs_per_s"}]`` for stages
        with MACs, bytes and latency all > 0 (others cannot be placed on log axes).
    """
    out = []
    for name, s in breakdown.items():
        nbytes = s["nmp_bytes"] if s["on_nmp"] else s["dram_bytes"]
        if s["macs"] > 0 and nbytes > 0 and s["latency_s"] > 0:
            out.append({"stage": name, "kind": stage_kind(name), "on_nmp": s["on_nmp"],
                        "intensity_mac_per_byte": s["macs"] / nbytes,
                        "rate_macs_per_s": s["macs"] / s["latency_s"]})
    return out


def roofs(hw, bits: Sequence[float] = (32.0,)) -> list[dict]:
    """The roofs of a `HardwareSpec`.

    Args:
        hw: a `codesign.hwmodel.HardwareSpec`.
        bits: operand bit-widths to draw compute ceilings for (fp32 and the narrowest used).

    Returns:
        ``[{"label", "peak_macs_per_s", "bw_bytes_per_s", "near_memory": bool}]``: host matrix
        and vector ceilings per distinct rate (with the spec's efficiencies) under the DRAM
        bandwidth, and, if ``hw.nmp``, the near-memory ceilings (fp32 / integer) under the units'
        total internal bandwidth.
    """
    from codesign import hwmodel

    out, seen = [], set()
    bw = hw.dram_bw_bytes_per_s * hw.dram_efficiency
    for unit, fn, eff in (("matrix", hwmodel.matrix_macs_per_s, hw.matrix_efficiency),
                          ("vector", hwmodel.vector_macs_per_s, hw.vector_efficiency)):
        for b in sorted(set(float(x) for x in bits), reverse=True):
            peak = float(fn(hw, b)) * eff
            if (unit, peak) not in seen:
                seen.add((unit, peak))
                out.append({"label": f"{unit} {'fp32' if b >= 32 else f'{b:g}-bit'}",
                            "peak_macs_per_s": peak, "bw_bytes_per_s": bw, "near_memory": False})
    if hw.nmp is not None:
        nbw = hw.nmp.units * hw.nmp.internal_bw_bytes_per_s
        rates = [("fp32", hw.nmp.fp32_macs_per_s)]
        if min(bits) < 32 and hw.nmp.int_macs_per_s != hw.nmp.fp32_macs_per_s:
            rates.append(("int", hw.nmp.int_macs_per_s))
        for name, r in rates:
            out.append({"label": f"near-memory {name}", "peak_macs_per_s": hw.nmp.units * r,
                        "bw_bytes_per_s": nbw, "near_memory": True})
    return out


def _panel(ax, hw, models: dict[str, dict], bits: list[float]) -> None:
    pts = {m: stage_points(bd) for m, bd in models.items()}
    xs = [p["intensity_mac_per_byte"] for ps in pts.values() for p in ps]
    rf = roofs(hw, bits)
    ridge = [r["peak_macs_per_s"] / r["bw_bytes_per_s"] for r in rf]
    lo = min(xs + ridge) / 10
    hi = max(xs + ridge) * 10
    grid = np.logspace(np.log10(lo), np.log10(hi), 200)
    for r in rf:
        y = np.minimum(r["peak_macs_per_s"], grid * r["bw_bytes_per_s"])
        ax.plot(grid, y, color="C4" if r["near_memory"] else "0.35", lw=1.0,
                ls="--" if r["near_memory"] else "-", zorder=1)
        ax.annotate(r["label"], (hi, r["peak_macs_per_s"]), ha="right", va="bottom", fontsize=6,
                    color="C4" if r["near_memory"] else "0.3")
    for model, ps in pts.items():
        marker, mlabel = _MODEL_MARKERS[model]
        for p in ps:
            c = KIND_COLORS.get(p["kind"], "C8")
            ax.plot(p["intensity_mac_per_byte"], p["rate_macs_per_s"], marker, ms=6, color=c,
                    mfc="none" if p["on_nmp"] else c, zorder=3, ls="none")
            ax.annotate(p["stage"].replace("layer", "L"), (p["intensity_mac_per_byte"], p["rate_macs_per_s"]),
                        xytext=(3, -3 if model == "codesign" else 3), textcoords="offset points", fontsize=5,
                        color=c)
        ax.plot([], [], marker, color="0.3", ls="none", label=mlabel)
    for kind in dict.fromkeys(p["kind"] for ps in pts.values() for p in ps):
        ax.plot([], [], "s", color=KIND_COLORS.get(kind, "C8"), ls="none", label=f"stage: {kind}")
    if any(p["on_nmp"] for ps in pts.values() for p in ps):
        ax.plot([], [], "o", color="0.3", mfc="none", ls="none", label="on near-memory units")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.grid(True, which="major", alpha=0.25)


def draw(points: Sequence[dict], out: Path, stem: str, loss_pts: float = 1.0,
         dpi: int = DPI) -> tuple[list[Path], list[str]]:
    """Draw the roofline figure of every (dataset, model) in ``points``.

    Args:
        points: from `paper_figures.fronts.load_tradeoff`.
        out: output folder (created).
        stem: file name prefix.
        loss_pts: accuracy loss allowed for the co-design pick (percentage points).
        dpi: PNG resolution.

    Returns:
        ``(written paths, notes)``; notes say which panels or models were left out and why
        (unknown hardware preset, no breakdown, no co-design point within ``loss_pts``).
    """
    from codesign.hwmodel import presets

    by_dm: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for (dataset, model, hw), pts in fronts.panels(points).items():
        by_dm.setdefault((dataset, model), {})[hw] = pts
    several = len({d for d, _ in by_dm}) > 1
    written, notes = [], []
    for (dataset, model), per_hw in by_dm.items():
        panels = {}
        for hw, pts in per_hw.items():
            where = f"{dataset}/{model}/{hw}"
            if hw not in presets.names():
                notes.append(f"{where}: no roofline (no hardware preset {hw!r})")
                continue
            reps = fronts.representatives(pts, loss_pts)
            models = {}
            dense_bd = reps["dense"]["breakdown"] if reps["dense"] else None
            dense_bd = dense_bd or next((q["dense_breakdown"] for q in pts if q["dense_breakdown"]), None)
            if dense_bd:
                models["dense"] = dense_bd
            cod = reps["codesign"]
            if cod is None:
                notes.append(f"{where}: roofline without a co-design model (none within {loss_pts:g} pt)")
            elif cod["breakdown"] is None:
                notes.append(f"{where}: roofline without a co-design model (no breakdown recorded)")
            else:
                models["codesign"] = cod["breakdown"]
            if not any(stage_points(bd) for bd in models.values()):
                notes.append(f"{where}: no roofline (no stage with a breakdown to place)")
                continue
            bits = [32.0] + ([fronts.min_bits(cod)] if cod is not None else [])
            panels[hw] = (presets.get(hw), models, bits)
        if not panels:
            continue
        fig, axes = new_figure(1, len(panels), panel_w_in=4.0, panel_h_in=3.6)
        for ax, (hw, (spec, models, bits)) in zip(axes[0], panels.items()):
            _panel(ax, spec, models, bits)
            ax.set_title(hw)
            ax.set_xlabel("arithmetic intensity (MAC / DRAM byte)", fontsize=8)
        axes[0, 0].set_ylabel("achieved MAC/s (modeled)")
        h, lab = [], []
        for ax in axes[0]:
            h2, l2 = ax.get_legend_handles_labels()
            h, lab = dedupe_legend(h + h2, lab + l2)
        legend_right(fig, h, lab)
        fig.suptitle(f"{dataset} / {model}: roofline, stages of dense FP32 (o) and co-design (^) "
                     "models", fontsize=9)
        written += save_panel_figure(fig, out, stem, dataset, model, "roofline", several, dpi)
    return written, notes


def main(argv: Sequence[str] | None = None) -> list[Path]:
    """Command line: see the module docstring (`fronts.tradeoff_figure_main`). Prints the notes
    and the written paths; returns the written PNG and PDF paths.

    Raises:
        SystemExit: naming the file (and line), if the input is missing, malformed or empty.
    """
    return fronts.tradeoff_figure_main(argv, "roofline.py", __doc__, draw,
                                       "accuracy loss allowed for the co-design model (percentage points)")

if __name__ == "__main__":
    main()
