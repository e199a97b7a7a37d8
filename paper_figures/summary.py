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

It opens with the tables of `build` (also written as ``<results>/summary.json`` by `main` and by
``python -m paper_figures``): per (dataset, model, target), the dense accuracy and per method the
largest modeled energy and measured CPU latency reductions within ``--loss-pts`` of dense, and
whether the flagship's front dominates each baseline's (`paper_figures.fronts.cost_dominates`, at
every accuracy level within ``DOMINANCE_PTS`` of dense).
"""

from __future__ import annotations

import argparse
import json
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

__all__ = ["find_inputs", "build", "render", "render_build", "write", "main"]

UGS_METHOD = "ugs_int8"
DOMINANCE_PTS = 2.0
"""The accuracy levels at which the flagship's front must cost no more than a baseline's: those
within this many points of dense accuracy (issue 22)."""
# <dataset>_tradeoff[_budget][_quick].jsonl, as experiments/tradeoff.py names its outputs
TRADEOFF_NAME = re.compile(r"^[A-Za-z0-9-]+_tradeoff(_budget)?(_quick)?\.jsonl$")


def find_inputs(results: Path, quick: bool = False) -> list[Path]:
    """``results/<dataset>_tradeoff[_budget][_quick].jsonl``, one per result (the quick one only
    when ``quick`` or when it has no full partner)."""
    found = [p for p in results.glob("*_tradeoff*.jsonl") if TRADEOFF_NAME.match(p.name)]
    return prefer_quick_or_full(found, quick)


def _best(points: list[dict], dense_acc: float, ratio_field: str, loss_pts: float) -> dict | None:
    """The point of ``points`` with the largest reduction ``1 / p[ratio_field]`` among those whose mean
    accuracy is within ``loss_pts`` of ``dense_acc`` (points without that field left out)."""
    have = [p for p in points if p.get(ratio_field) is not None and not math.isnan(p["acc_pct"])]
    hit = fronts.best_reduction_within([(1.0 / p[ratio_field], p["acc_pct"]) for p in have], dense_acc, loss_pts)
    return None if hit is None else have[hit[0]]


def _dominance(flag: list[dict], base: list[dict], ratio_field: str, min_acc: float) -> dict | None:
    a = [(p[ratio_field], p["acc_pct"]) for p in flag if p.get(ratio_field) is not None]
    b = [(p[ratio_field], p["acc_pct"]) for p in base if p.get(ratio_field) is not None]
    if not a or not b:
        return None
    dom, worst, at = fronts.cost_dominates(a, b, min_acc)
    return {"dominates": dom, "worst_margin": worst, "at_accuracy": at}


def build(points: Sequence[dict], loss_pts: float = 1.0, dominance_pts: float = DOMINANCE_PTS) -> dict:
    """The machine-readable summary (``results/summary.json``) of tradeoff points.

    Args:
        points: from `paper_figures.fronts.load_tradeoff` (any datasets, models, targets).
        loss_pts: accuracy loss allowed for a method's best point (percentage points, >= 0).
        dominance_pts: the flagship's front is compared with each baseline's at every accuracy level
            within this many points of dense.

    Returns:
        ``summary[dataset][model][target]`` for every panel with a dense run, holding
        ``"dense_accuracy"`` (mean test accuracy of dense FP32, %), per other method ``{
        "modeled_energy_reduction", "measured_latency_reduction", "accuracy"}``: the largest dense / point
        modeled energy on that target among the method's points whose mean test accuracy is within
        ``loss_pts`` of dense, the largest dense / point measured CPU latency (`codesign.deploy.measure`;
        ratio of the seeds' mean latencies) among its measured points within ``loss_pts`` (None without
        one), the mean test accuracy (%) of the energy point and, as
        ``"energy_point_measured_latency_reduction"``, the measured CPU latency reduction of that same
        point (None where it was not measured) (all None when no point qualifies); and
        ``"dominance"``: per baseline method (registry family "baseline") present with the flagship
        (`fronts.FLAGSHIP`), ``{"modeled_energy": {"dominates", "worst_margin", "at_accuracy"},
        "measured_latency": ... or None}`` (`fronts.cost_dominates` with ``min_acc`` = dense −
        ``dominance_pts``; margin = baseline cost / flagship cost at the worst level).

    Raises:
        ValueError: ``loss_pts`` or ``dominance_pts`` negative or NaN.
    """
    if not (loss_pts >= 0 and dominance_pts >= 0):
        raise ValueError(f"build: loss_pts and dominance_pts must be >= 0, got {loss_pts!r}, {dominance_pts!r}")
    out: dict = {}
    for (dataset, model, hw), pts in fronts.panels(points).items():
        dense = fronts.dense_point(pts)
        if dense is None:
            continue
        entry = {"dense_accuracy": dense["acc_pct"]}
        methods = sorted({p["method"] for p in pts} - {fronts.DENSE_METHOD}, key=fronts.method_sort_key)
        by = {m: [p for p in pts if p["method"] == m and not math.isnan(p["acc_pct"])] for m in methods}
        for m in methods:
            e = _best(by[m], dense["acc_pct"], "energy_ratio", loss_pts)
            t = _best(by[m], dense["acc_pct"], "measured_latency_ratio", loss_pts)
            same = None if e is None else e.get("measured_latency_ratio")
            entry[m] = {"modeled_energy_reduction": None if e is None else 1.0 / e["energy_ratio"],
                        "measured_latency_reduction": None if t is None else 1.0 / t["measured_latency_ratio"],
                        "accuracy": None if e is None else e["acc_pct"],
                        "energy_point_measured_latency_reduction": None if same is None else 1.0 / same}
        if by.get(fronts.FLAGSHIP):
            min_acc = dense["acc_pct"] - dominance_pts
            entry["dominance"] = {
                b: {"modeled_energy": _dominance(by[fronts.FLAGSHIP], by[b], "energy_ratio", min_acc),
                    "measured_latency": _dominance(by[fronts.FLAGSHIP], by[b], "measured_latency_ratio", min_acc)}
                for b in methods if fronts.family(b) == "baseline" and by[b]}
        out.setdefault(dataset, {}).setdefault(model, {})[hw] = entry
    return out


def _x(v) -> str:
    return "–" if v is None else f"{v:.2f}x"


def _dom(d) -> str:
    if d is None:
        return "–"
    if d["worst_margin"] is None:
        return "yes (no baseline point within range)"
    return f"{'yes' if d['dominates'] else 'NO'} (worst {d['worst_margin']:.2f}x at {d['at_accuracy']:.2f} %)"


def render_build(summary: dict, loss_pts: float = 1.0, dominance_pts: float = DOMINANCE_PTS,
                 ceilings: dict | None = None) -> list[str]:
    """The markdown tables of a `build` summary (lines); ``ceilings``: ``{dataset: {model: {hw: {"ceiling"}}}}``
    (``results/reduction_bound.json``'s ``bounds``), each stated under its table's title."""
    lines = ["## Summary (`results/summary.json`)", "",
             f"Per method the largest modeled energy reduction among its points within {loss_pts:g} pt of dense "
             f"accuracy, that point's accuracy and measured CPU latency reduction (seeds' mean latencies, "
             f"`codesign.deploy`), and the largest measured latency reduction among its points within "
             f"{loss_pts:g} pt. Dominance: at every accuracy level within "
             f"{dominance_pts:g} pt of dense that the baseline reaches, the flagship `{fronts.FLAGSHIP}` costs no "
             "more (worst margin = baseline cost / flagship cost; < 1x: the baseline is cheaper there).", ""]
    for dataset, models in summary.items():
        for model, hws in models.items():
            for hw, entry in hws.items():
                lines += [f"### Summary of {dataset} / {model} / {hw}: dense {entry['dense_accuracy']:.2f} %", ""]
                ceiling = ((ceilings or {}).get(dataset, {}).get(model, {}).get(hw) or {}).get("ceiling")
                if ceiling is not None:
                    lines += [f"No method can pass {ceiling:.1f}x modeled energy reduction here under this cost model "
                              "(every gate closed, every tensor at 1 bit, FP32 logits: `experiments/reduction_bound.py`).",
                              ""]
                lines += ["| method | modeled energy reduction | accuracy (%) | measured latency reduction, same point "
                          "| largest measured latency reduction |", "|---|---:|---:|---:|---:|"]
                for m, v in entry.items():
                    if m in ("dense_accuracy", "dominance"):
                        continue
                    acc = "–" if v["accuracy"] is None else f"{v['accuracy']:.2f}"
                    lines.append(f"| {m} | {_x(v['modeled_energy_reduction'])} | {acc} | "
                                 f"{_x(v['energy_point_measured_latency_reduction'])} | "
                                 f"{_x(v['measured_latency_reduction'])} |")
                lines.append("")
                if entry.get("dominance"):
                    lines += [f"| `{fronts.FLAGSHIP}` front vs | modeled energy | measured latency |", "|---|---|---|"]
                    lines += [f"| {b} | {_dom(d['modeled_energy'])} | {_dom(d['measured_latency'])} |"
                              for b, d in entry["dominance"].items()]
                    lines.append("")
    return lines


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
        changes only when the results do. A ``reduction_bound.json`` beside an input file
        (`experiments/reduction_bound.py`) puts each (dataset, model, target)'s ceiling under its title.
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
    ceilings: dict = {}
    for bound in dict.fromkeys(Path(path).parent / "reduction_bound.json" for path, _ in inputs):
        if bound.exists():
            for dataset, models in json.loads(bound.read_text())["bounds"].items():
                ceilings.setdefault(dataset, {}).update(models)
    lines += render_build(build(all_points, loss_pts), loss_pts, ceilings=ceilings)
    for key, pts in fronts.panels(all_points).items():
        _panel(lines, key, pts, loss_pts)
    return "\n".join(lines).rstrip("\n") + "\n"


def write(inputs: Sequence[tuple[Path, list[dict]]], md: Path, js: Path, loss_pts: float = 1.0) -> list[Path]:
    """Writes `render` to ``md`` and `build` (JSON, sorted keys) to ``js``, each atomically; returns both paths."""
    write_text_atomic(md, render(inputs, loss_pts))
    summary = build([p for _, pts in inputs for p in pts], loss_pts)
    write_text_atomic(js, json.dumps(summary, indent=1, sort_keys=True, allow_nan=False) + "\n")
    return [md, js]


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
    parser.add_argument("--md", type=Path, default=None, help="output markdown (default <results>/summary.md; "
                        "the JSON beside it, same name .json)")
    parser.add_argument("--quick", action="store_true", help="prefer the _quick result files")
    parser.add_argument("--loss-pts", type=float, default=1.0,
                        help="accuracy loss allowed, percentage points (default 1)")
    args = parser.parse_args(argv)
    files = args.files or find_inputs(args.results, args.quick)
    if not files:
        raise SystemExit(f"summary.py: no *_tradeoff.jsonl in {args.results}")
    inputs = [(f, fronts.load_or_exit(f, "summary.py")) for f in files]
    md = args.md or args.results / "summary.md"
    for path in write(inputs, md, md.with_suffix(".json"), args.loss_pts):
        print(f"wrote {path}")
    return md


if __name__ == "__main__":
    main()
