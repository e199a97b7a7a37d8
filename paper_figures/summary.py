"""The generated markdown summary of the accuracy-vs-cost fronts (``results/summary.md``).

Usage (from the repository root)::

    python paper_figures/summary.py [FILE.jsonl ...] [--results DIR] [--md PATH] [--loss-pts 1.0]

Reads tradeoff JSONL files (format: `paper_figures.fronts`; without FILE arguments
``<results>/<dataset>_tradeoff[_budget].jsonl``) and writes, atomically, one markdown file (default
``<results>/summary.md``) with, per (dataset, model, hardware):

- the dense FP32 reference: accuracy and modeled energy / latency;
- per method, the largest energy reduction (dense energy / energy) among its points within
  ``--loss-pts`` percentage points of dense accuracy;
- whether the co-design front dominates the UGS+INT8 front (energy and latency; for each
  ugs_int8 front point, a co-design front point at most as costly and at least as accurate),
  with the worst accuracy margin (`paper_figures.fronts.front_dominates`);
- each method's Pareto front (modeled energy): accuracy mean ± std over seeds, energy and
  latency reduction vs dense.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import Sequence

if __package__ in (None, ""):  # run as a script: make `paper_figures` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paper_figures import fronts  # noqa: E402
from paper_figures.common import DEFAULT_RESULTS, REPO_ROOT, prefer_quick_or_full  # noqa: E402

from codesign.results import write_text_atomic  # noqa: E402

__all__ = ["find_inputs", "render", "main"]

UGS_METHOD = "ugs_int8"
# <dataset>_tradeoff[_budget][_quick].jsonl, as experiments/tradeoff.py names its outputs
TRADEOFF_NAME = re.compile(r"^[A-Za-z0-9-]+_tradeoff(_budget)?(_quick)?\.jsonl$")


def find_inputs(results: Path, quick: bool = False) -> list[Path]:
    """``results/<dataset>_tradeoff[_budget][_quick].jsonl``, one per result (the quick one only
    when ``quick`` or when it has no full partner)."""
    found = [p for p in results.glob("*_tradeoff*.jsonl") if TRADEOFF_NAME.match(p.name)]
    return prefer_quick_or_full(found, quick)


def _acc(p: dict) -> str:
    return f"{p['acc_pct']:.2f} ± {p['acc_pct_std']:.2f} (n={p['n_seeds']})"


def _red(p: dict, cost: str) -> str:
    return f"{1.0 / p[fronts.COSTS[cost][2]]:.2f}x"


def _setting(p: dict) -> str:
    parts = []
    if p["budget"] is not None:
        parts.append(f"budget {p['budget']:g}")
    elif p["cost_weight"] is not None and p["family"] == "codesign":
        parts.append(f"λ={p['cost_weight']:g}")
    if p["keep"] is not None:
        parts.append(f"keep {p['keep']:g}")
    if p["round"] is not None:
        parts.append(f"round {p['round']}")
    for k in ("edge", "feature", "channel"):
        v = p["densities"].get(k)
        if v is not None and v < 1.0:
            parts.append(f"{k} {v:.2f}")
    if p["layer_bits"]:
        lo, hi = fronts.min_bits(p), max(p["layer_bits"].values())
        parts.append(f"bits {lo:g}" if lo == hi else f"bits {lo:g}-{hi:g}")
    return ", ".join(parts) or "–"


def _margin(m: float) -> str:
    return "−∞ (a UGS point is cheaper than every co-design point)" if m == -math.inf else f"{m:+.2f} pt"


def _panel(lines: list[str], key: tuple[str, str, str], pts: list[dict], loss_pts: float) -> None:
    dataset, model, hw = key
    lines += [f"## {dataset} / {model} / {hw}", ""]
    dense = fronts.dense_point(pts)
    if dense is None:
        lines += ["No dense FP32 run: reductions are relative to each run's recorded dense FP32 "
                  "cost; accuracy comparisons are left out.", ""]
    else:
        lines += [f"Dense FP32: test accuracy (%) {_acc(dense)}; modeled energy "
                  f"{dense['energy_j']:.4g} J, latency {dense['latency_s']:.4g} s.", ""]
    methods = sorted({p["method"] for p in pts}, key=fronts.method_sort_key)
    ok = [p for p in pts if not math.isnan(p["acc_pct"])]

    others = [m for m in methods if m != fronts.DENSE_METHOD]
    if dense is not None and not others:
        lines += ["No other method than dense on this hardware yet.", ""]
    elif dense is not None:
        lines += [f"Largest energy reduction within {loss_pts:g} pt of dense accuracy:", "",
                  "| method | energy reduction | latency reduction | test acc (%) | setting |",
                  "|---|---:|---:|---:|---|"]
        for m in others:
            mp = [p for p in ok if p["method"] == m]
            best = fronts.best_point_within(mp, dense["acc_pct"], "energy", loss_pts)
            if best is None:
                top = max(mp, key=lambda p: p["acc_pct"], default=None)
                why = ("none (diverged: NaN accuracy)" if top is None
                       else f"none (most accurate: {top['acc_pct']:.2f} %)")
                lines.append(f"| {m} | {why} | – | – | – |")
            else:
                lines.append(f"| {m} | {_red(best, 'energy')} | {_red(best, 'latency')} | {_acc(best)} "
                             f"| {_setting(best)} |")
        lines.append("")

    ugs = [p for p in ok if p["method"] == UGS_METHOD]
    lines += [f"Does the co-design front dominate the UGS+INT8 (`{UGS_METHOD}`) front? (each UGS front "
              "point matched by a co-design front point at most as costly and at least as accurate; "
              "margin = that co-design accuracy − UGS accuracy, worst over the UGS front)", ""]
    if not ugs:
        lines += [f"No `{UGS_METHOD}` runs on this hardware.", ""]
    else:
        lines += ["| cost | co-design front of | dominates | worst accuracy margin |", "|---|---|---|---|"]
        for cost in ("energy", "latency"):
            ratio = fronts.COSTS[cost][2]
            b = [(p[ratio], p["acc_pct"]) for p in fronts.front(ugs, cost)]
            for name, members in (("codesign", [p for p in ok if p["method"] == "codesign"]),
                                  ("co-design family", [p for p in ok if p["family"] == "codesign"])):
                if not members:
                    lines.append(f"| {cost} | {name} | no runs | – |")
                    continue
                a = [(p[ratio], p["acc_pct"]) for p in fronts.front(members, cost)]
                dom, worst = fronts.front_dominates(a, b)
                lines.append(f"| {cost} | {name} | {'yes' if dom else 'no'} | {_margin(worst)} |")
        lines.append("")

    lines += ["Pareto front of each method (modeled energy; cheapest first):", "",
              "| method | setting | test acc (%) | energy reduction | latency reduction |",
              "|---|---|---:|---:|---:|"]
    for m in methods:
        for p in fronts.front([p for p in ok if p["method"] == m], "energy"):
            lines.append(f"| {m} | {_setting(p)} | {_acc(p)} | {_red(p, 'energy')} | {_red(p, 'latency')} |")
    n_nan = sum(math.isnan(p["acc_pct"]) for p in pts)
    if n_nan:
        lines += ["", f"{n_nan} point(s) with a diverged run (NaN accuracy) are left out."]
    lines.append("")


def _rel(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def render(inputs: Sequence[tuple[Path, list[dict]]], loss_pts: float = 1.0) -> str:
    """The summary markdown of the points of each input file.

    Args:
        inputs: ``(path, points)`` pairs, points from `paper_figures.fronts.load_tradeoff`.
        loss_pts: accuracy loss allowed for "within" (percentage points).

    Returns:
        The markdown text (ends with a newline). Deterministic: no dates, so the committed file
        changes only when the results do.
    """
    n_runs = sum(len(p["lines"]) for _, pts in inputs for p in pts)
    srcs = ", ".join(f"`{_rel(path)}`" for path, _ in inputs)
    lines = ["# Accuracy vs modeled cost: the Pareto fronts", "",
             f"Generated by `python paper_figures/summary.py` (also run by `python -m paper_figures`) from "
             f"{srcs} ({n_runs} runs); do not edit by hand.", "",
             "Test accuracy in %, mean ± sample std over seeds (n = seeds). Costs are modeled by "
             "`codesign.hwmodel` for the hardened model on the named hardware; a reduction is the dense "
             "FP32 model's cost on the same hardware / the model's cost (higher is cheaper). \"Within "
             f"{loss_pts:g} pt\": mean accuracy >= dense mean − {loss_pts:g} percentage point(s). "
             "Co-design family: " + ", ".join(f"`{m}`" for m in fronts.CODESIGN_METHODS) + ".", ""]
    all_points = [p for _, pts in inputs for p in pts]
    for key, pts in fronts.panels(all_points).items():
        _panel(lines, key, pts, loss_pts)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> Path:
    """Command line: see the module docstring.

    Returns:
        The path of the written markdown file.

    Raises:
        SystemExit: if no input is found, or one is missing, malformed (naming file and line)
            or empty.
    """
    parser = argparse.ArgumentParser(prog="summary.py", description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="tradeoff JSONL files")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                        help=f"folder searched when no FILE is given (default {DEFAULT_RESULTS})")
    parser.add_argument("--md", type=Path, default=None, help="output markdown (default <results>/summary.md)")
    parser.add_argument("--quick", action="store_true", help="prefer the _quick result files")
    parser.add_argument("--loss-pts", type=float, default=1.0,
                        help="accuracy loss allowed, percentage points (default 1)")
    args = parser.parse_args(argv)
    files = args.files or find_inputs(args.results, args.quick)
    if not files:
        raise SystemExit(f"summary.py: no *_tradeoff.jsonl in {args.results}")
    inputs = [(f, fronts.load_or_exit(f, "summary.py")) for f in files]
    md = args.md or args.results / "summary.md"
    write_text_atomic(md, render(inputs, args.loss_pts))
    print(f"wrote {md}")
    return md


if __name__ == "__main__":
    main()
