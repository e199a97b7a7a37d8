"""The generated markdown summary of the accuracy-vs-cost fronts (``results/summary.md``).

Usage (from the repository root)::

    python paper_figures/summary.py [FILE.jsonl ...] [--results DIR] [--md PATH] [--loss-pts 1.0]

Reads tradeoff JSONL files (format: `paper_figures.fronts`; without FILE arguments
``<results>/<dataset>_tradeoff[_budget].jsonl``) and writes, atomically, one markdown file (default
``<results>/summary.md``) with, per (dataset, model, hardware):

- the `build` tables (also written as ``<results>/summary.json`` by `main` and by ``python -m
  paper_figures``): per panel the dense FP32 reference and per method the point chosen on
  validation accuracy, with its test accuracy, n, and modeled / measured reductions;
- each method's Pareto front (modeled energy vs mean test accuracy), descriptive only.
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

__all__ = ["find_inputs", "build", "render", "render_build", "render_doc", "write", "main"]

UGS_METHOD = "ugs_int8"
# <dataset>_tradeoff[_budget][_quick].jsonl, as experiments/tradeoff.py names its outputs
TRADEOFF_NAME = re.compile(r"^[A-Za-z0-9-]+_tradeoff(_budget)?(_quick)?\.jsonl$")


def find_inputs(results: Path, quick: bool = False) -> list[Path]:
    """``results/<dataset>_tradeoff[_budget][_quick].jsonl``, one per result (the quick one only
    when ``quick`` or when it has no full partner)."""
    found = [p for p in results.glob("*_tradeoff*.jsonl") if TRADEOFF_NAME.match(p.name)]
    return prefer_quick_or_full(found, quick)


MIN_SEEDS = fronts.MIN_SEEDS
"""Seeds a point needs to be reported (issue 34: >= 5 for every point in the summary)."""


def _setting_label(p: dict) -> str:
    """A point's grid coordinates: level (cost weight / budget / keep / UGS round), the grid's epochs
    where ``--epochs`` set them, and search candidate."""
    parts = []
    for f, name in (("cost_weight", "λ"), ("budget", "budget "), ("keep", "keep "), ("round", "round ")):
        v = p.get(f)
        if v is not None and not (f == "cost_weight" and p["family"] not in ("codesign", "ablation")):
            parts.append(f"{name}{v:g}" if f != "round" else f"round {v}")
    if p["config"].get("epochs") is not None:  # a grid-wide --epochs override (experiments/tradeoff.py)
        parts.append(f"{p['config']['epochs']} epochs")
    cand = p["config"].get("candidate")
    if cand is not None:
        parts.append(f"candidate {cand}")
    return ", ".join(parts) or "–"


def _reported(p: dict) -> dict:
    """The numbers the summary reports for a selected point."""
    meas, local = p.get("measured_latency_ratio"), p.get("modeled_local_latency_ratio")
    return {"setting": _setting_label(p), "candidate": p["config"].get("candidate"),
            "train": {k: v for k, v in (p["config"].get("train") or {}).items()
                      if k in ("lr", "weight_decay", "distill_weight", "select", "cost_weight", "budget", "epochs")},
            "selected_on": "validation", "n": p["n_seeds"],
            "val_accuracy": p["val_acc_pct"], "test_accuracy": p["acc_pct"], "test_std": p["acc_pct_std"],
            "modeled_energy_reduction": 1.0 / p["energy_ratio"], "modeled_latency_reduction": 1.0 / p["latency_ratio"],
            "energy_j": p["energy_j"], "latency_s": p["latency_s"],
            "measured_latency_reduction": None if meas is None else 1.0 / meas, "n_measured": p["n_measured"],
            "modeled_cpu_latency_reduction": None if local is None else 1.0 / local}


LATE_SELECTION = 0.9
"""A reference whose latest seed kept an epoch in the last tenth of its training (selected epoch
>= this fraction of the epochs) is reported as still rising: its validation curve is not shown flat
(issue 34: dense references trained to convergence)."""


def _convergence(p: dict) -> dict:
    """The reference's selected epochs (per seed, sorted), its epochs and whether it was still rising
    (`LATE_SELECTION`; None where the records give no selected epoch or epoch count)."""
    chosen, epochs = p["selected_epochs"], p["epochs"]
    rising = None if not chosen or not epochs else max(chosen) + 1 > LATE_SELECTION * epochs
    return {"selected_epochs": chosen, "epochs": epochs, "still_rising": rising}


def _stores_priced(pts: Sequence[dict]) -> list[str]:
    """The input-feature stores the panel's records were priced with: ``["dense", "csr"]`` where
    every record was priced under the ``"cheaper_store_always"`` reference
    (`codesign.experiment.REFERENCE`: both stores for every run) or set
    ``TrainConfig.cost.sparse_features`` (before it, the CSR store was priced only then), else
    ``["dense"]``: the reference is then the dense-stored FP32 model, not the cheaper of the two."""
    every = all(p.get("reference") == "cheaper_store_always"
                or (p["config"].get("train") or {}).get("sparse_features") for p in pts)
    return ["dense", "csr"] if every else ["dense"]


def build(points: Sequence[dict], loss_pts: float = 1.0, min_seeds: int = MIN_SEEDS) -> dict:
    """The machine-readable summary (``results/summary.json``) of tradeoff points, every choice made on
    validation accuracy (issue 34).

    Per panel (dataset, model, target): the dense FP32 reference is the ``dense`` point (one per search
    candidate, `experiments/tradeoff.py` ``CANDIDATES``) with the highest mean validation accuracy among
    those with at least ``min_seeds`` seeds; its cost on the target is the best dense configuration's
    (input features stored dense or CSR, whichever the target runs cheaper: `codesign.train.dense_cost`).
    Per other method, among its points with at least ``min_seeds`` seeds whose mean validation
    accuracy is within ``loss_pts`` of the reference's, the one with the largest modeled energy
    reduction is reported with its validation and test mean, test sample std (ddof 1), n, modeled
    energy and latency reductions and, where it was deployed, its measured CPU latency reduction
    (seeds' mean latency of the dense FP32 program timed beside it / its own). Test accuracy plays no
    part in any choice.

    Args:
        points: from `paper_figures.fronts.load_tradeoff` (any datasets, models, targets).
        loss_pts: validation accuracy loss allowed for a method's point (percentage points, >= 0).
        min_seeds: seeds a point needs to be considered (>= 1).

    Returns:
        ``summary[dataset][model][target]`` = ``{"loss_pts", "min_seeds", "reference": {...} or None,
        "methods": {method: reported point or {"selected": None, "why": ...}}, "insufficient_seeds":
        [{"method", "setting", "n"}, ...], "not_run": [method, ...]}`` (points left out for too few
        seeds: listed, never silently dropped; ``not_run``: methods that another panel of the same model
        (another target, or another dataset) has and this one has no record of). A reported point: ``setting``,
        ``candidate``, ``train`` (its learning-rate, decay, distillation, selection and cost
        fields), ``selected_on`` ("validation"), ``n``,
        ``val_accuracy`` / ``test_accuracy`` / ``test_std`` (%), ``modeled_energy_reduction`` /
        ``modeled_latency_reduction`` (reference cost / point cost on the target), ``energy_j`` /
        ``latency_s`` (modeled), ``measured_latency_reduction`` (None where not deployed), ``n_measured``,
        ``modeled_cpu_latency_reduction`` (the same deployed programs priced by the CPU preset the
        measurement ran on, ``modeled_local``: the model beside the measurement; None where not deployed).
        The reference also gives ``candidates``, ``stores_priced``, ``dense_energy_j`` /
        ``dense_latency_s`` and its convergence: ``selected_epochs``, ``epochs`` and ``still_rising``
        (a seed kept an epoch in the last tenth of training, `LATE_SELECTION`).

    Raises:
        ValueError: ``loss_pts`` negative or NaN, or ``min_seeds`` < 1.
    """
    if not loss_pts >= 0:
        raise ValueError(f"build: loss_pts must be >= 0, got {loss_pts!r}")
    if not (isinstance(min_seeds, int) and min_seeds >= 1):
        raise ValueError(f"build: min_seeds must be an integer >= 1, got {min_seeds!r}")
    out: dict = {}
    panels = fronts.panels(points)
    for (dataset, model, hw), pts in panels.items():
        pts = [p for p in pts if not math.isnan(p["acc_pct"])]
        few = [p for p in pts if p["n_seeds"] < min_seeds]
        ok = [p for p in pts if p["n_seeds"] >= min_seeds and not math.isnan(p["val_acc_pct"])]
        entry: dict = {"loss_pts": loss_pts, "min_seeds": min_seeds, "reference": None, "methods": {},
                       "insufficient_seeds": [{"method": p["method"], "setting": _setting_label(p), "n": p["n_seeds"]}
                                              for p in few]}
        out.setdefault(dataset, {}).setdefault(model, {})[hw] = entry
        dense = [p for p in ok if p["method"] == fronts.DENSE_METHOD]
        if not dense:
            continue
        ref = fronts.dense_point(dense, min_seeds)
        entry["reference"] = {**_reported(ref), "dense_energy_j": ref["dense_energy_j"],
                              "dense_latency_s": ref["dense_latency_s"],
                              "candidates": len(dense), "stores_priced": _stores_priced(pts), **_convergence(ref)}
        methods = sorted({p["method"] for p in pts} - {fronts.DENSE_METHOD}, key=fronts.method_sort_key)
        for m in methods:
            mine = [p for p in ok if p["method"] == m]
            best = fronts.best_point_within(mine, ref["val_acc_pct"], "energy", loss_pts, min_seeds)
            if best is not None:
                entry["methods"][m] = {**_reported(best), "points_considered": len(mine)}
            elif mine:
                top = max(mine, key=lambda p: p["val_acc_pct"])
                entry["methods"][m] = {"selected": None, "points_considered": len(mine),
                                       "why": f"no point within {loss_pts:g} pt of the reference's validation accuracy "
                                              f"({ref['val_acc_pct']:.2f} %); most accurate on validation: "
                                              f"{top['val_acc_pct']:.2f} % ({_setting_label(top)})"}
            else:
                entry["methods"][m] = {"selected": None, "points_considered": 0,
                                       "why": f"no point with >= {min_seeds} seeds"}
    for dataset, models in out.items():  # what a sibling panel (another target or dataset) has and this one lacks
        for model, hws in models.items():
            every = set().union(*({p["method"] for p in pts} for (_, m, _), pts in panels.items() if m == model))
            for hw, entry in hws.items():
                here = {p["method"] for p in panels[dataset, model, hw]}
                entry["not_run"] = sorted(every - here, key=fronts.method_sort_key)
    return out


def _x(v) -> str:
    return "–" if v is None else f"{v:.2f}x"


def render_build(summary: dict, loss_pts: float = 1.0, ceilings: dict | None = None) -> list[str]:
    """The markdown tables of a `build` summary (lines); ``ceilings``: ``{dataset: {model: {hw: {"ceiling"}}}}``
    (``results/reduction_bound.json``'s ``bounds``), each stated under its table's title."""
    lines = ["## Summary (`results/summary.json`)", "",
             f"Every choice on validation accuracy: the dense FP32 reference is the dense search candidate with "
             f"the best mean validation accuracy; per method, among its points with >= {MIN_SEEDS} seeds whose mean "
             f"validation accuracy is within {loss_pts:g} pt of the reference's, the one with the largest modeled "
             "energy reduction. Reported: validation and test accuracy (%, mean; test ± sample std, ddof 1, over n "
             "seeds), the modeled energy and latency reduction against the best dense configuration on that target "
             "(features stored dense or CSR, whichever it runs cheaper, where the runs priced the CSR store: each "
             "panel says which stores were priced), and the measured CPU latency reduction of "
             "the deployed program against the dense FP32 program timed beside it (`codesign.deploy`; – where not "
             "deployed), beside it the same two programs as the `cpu_numpy` preset priced them when they were "
             "measured (`modeled_local`: the model's prediction of that measurement, with the fit of that day).", ""]
    for dataset, models in summary.items():
        for model, hws in models.items():
            for hw, entry in hws.items():
                ref = entry["reference"]
                if ref is None:
                    lines += [f"### {dataset} / {model} / {hw}: no dense reference with >= {entry['min_seeds']} seeds",
                              ""]
                    lines += _left_out(entry)
                    continue
                lines += [f"### {dataset} / {model} / {hw}: dense reference ({ref['setting']}) validation "
                          f"{ref['val_accuracy']:.2f} %, test {ref['test_accuracy']:.2f} ± {ref['test_std']:.2f} "
                          f"(n={ref['n']}); modeled {ref['dense_energy_j']:.4g} J, {ref['dense_latency_s']:.4g} s", ""]
                if ref.get("still_rising"):
                    lines += [f"Not shown converged: a seed of the reference kept epoch {ref['selected_epochs'][-1]} "
                              f"of {ref['epochs']}, in the last tenth of its training (its seeds kept epochs "
                              f"{ref['selected_epochs'][0]}-{ref['selected_epochs'][-1]}), so its validation accuracy "
                              f"was still rising and a longer-trained reference may be more accurate.", ""]
                if ref.get("stores_priced") == ["dense"]:
                    lines += ["Priced with the input features stored dense only: these runs did not set "
                              "`TrainConfig.cost.sparse_features`, so the CSR store, which this target may run "
                              "cheaper, was not priced for the reference or the methods (the reductions are "
                              "against a dense-stored FP32 reference; docs/log/results.md, 2026-11-29).", ""]
                ceiling = ((ceilings or {}).get(dataset, {}).get(model, {}).get(hw) or {}).get("ceiling")
                if ceiling is not None:
                    lines += [f"No method can pass {ceiling:.1f}x modeled energy reduction here under this cost model "
                              "(every gate closed, every tensor at 1 bit, FP32 logits: `experiments/reduction_bound.py`).",
                              ""]
                lines += _method_table(entry) if entry["methods"] else [
                    f"No method other than the reference has a point here with >= {entry['min_seeds']} seeds.", ""]
                lines += _left_out(entry)
    return lines


def _method_table(entry: dict) -> list[str]:
    """A panel's table of its methods' chosen points (or why none was chosen), then a blank line."""
    lines = ["| method | setting | val (%) | test (%) | n | modeled energy reduction "
             "| modeled latency reduction | measured CPU latency reduction "
             "| modeled CPU latency reduction |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for m, v in entry["methods"].items():
        if v.get("selected", True) is None:
            lines.append(f"| {m} | {v['why']} | | | | | | | |")
            continue
        lines.append(f"| {m} | {v['setting']} | {v['val_accuracy']:.2f} | {v['test_accuracy']:.2f} ± "
                     f"{v['test_std']:.2f} | {v['n']} | {_x(v['modeled_energy_reduction'])} | "
                     f"{_x(v['modeled_latency_reduction'])} | {_x(v['measured_latency_reduction'])} | "
                     f"{_x(v.get('modeled_cpu_latency_reduction'))} |")
    return lines + [""]


def _left_out(entry: dict) -> list[str]:
    """A panel's lines for the points left out for too few seeds and the methods not run on it."""
    lines = []
    if entry["insufficient_seeds"]:
        few = ", ".join(f"{d['method']} ({d['setting']}: n={d['n']})" for d in entry["insufficient_seeds"])
        lines += [f"Left out, fewer than {entry['min_seeds']} seeds: {few}.", ""]
    if entry.get("not_run"):
        lines += [f"Not run in this panel (another target's or dataset's panel of this model has them): "
                  f"{', '.join(entry['not_run'])}.", ""]
    return lines


def _acc(p: dict) -> str:
    return f"{p['acc_pct']:.2f} ± {p['acc_pct_std']:.2f} (n={p['n_seeds']})"


def _red(p: dict, cost: str) -> str:
    return f"{1.0 / p[fronts.COSTS[cost][2]]:.2f}x"


def _setting(p: dict) -> str:
    """A front point's grid coordinates (`_setting_label`, the one label of a setting) and what
    training kept: masks' densities below 1 and the learned bit-widths."""
    label = _setting_label(p)
    parts = [] if label == "–" else [label]
    for k in ("edge", "feature", "channel"):
        v = p["densities"].get(k)
        if v is not None and v < 1.0:
            parts.append(f"{k} {v:.2f}")
    if p["layer_bits"]:
        lo, hi = fronts.min_bits(p), max(p["layer_bits"].values())
        parts.append(f"bits {lo:g}" if lo == hi else f"bits {lo:g}-{hi:g}")
    return ", ".join(parts) or "–"


def _panel(lines: list[str], key: tuple[str, str, str], pts: list[dict]) -> None:
    """Every point's Pareto front per method (descriptive: nothing is chosen from it)."""
    dataset, model, hw = key
    lines += [f"## {dataset} / {model} / {hw}", ""]
    methods = sorted({p["method"] for p in pts}, key=fronts.method_sort_key)
    ok = [p for p in pts if not math.isnan(p["acc_pct"])]
    lines += ["Pareto front of each method (modeled energy vs mean test accuracy; cheapest first; descriptive, "
              "the summary above chooses on validation):", "",
              "| method | setting | val (%) | test acc (%) | energy reduction | latency reduction |",
              "|---|---|---:|---:|---:|---:|"]
    for m in methods:
        for p in fronts.front([p for p in ok if p["method"] == m], "energy"):
            lines.append(f"| {m} | {_setting(p)} | {p['val_acc_pct']:.2f} | {_acc(p)} | {_red(p, 'energy')} "
                         f"| {_red(p, 'latency')} |")
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
             "Accuracy in %, mean (test: ± sample std, ddof 1) over seeds (n = seeds). Costs are modeled by "
             "`codesign.hwmodel` for the hardened model on the named hardware; a reduction is the best dense "
             "FP32 configuration's cost on the same hardware / the model's cost (higher is cheaper). "
             "Co-design family: " + ", ".join(f"`{m}`" for m in fronts.CODESIGN_METHODS) + ".", ""]
    all_points = [p for _, pts in inputs for p in pts]
    ceilings: dict = {}
    for bound in dict.fromkeys(Path(path).parent / "reduction_bound.json" for path, _ in inputs):
        if bound.exists():
            for dataset, models in json.loads(bound.read_text())["bounds"].items():
                ceilings.setdefault(dataset, {}).update(models)
    lines += render_build(build(all_points, loss_pts), loss_pts, ceilings=ceilings)
    for key, pts in fronts.panels(all_points).items():
        _panel(lines, key, pts)
    return "\n".join(lines).rstrip("\n") + "\n"


def render_doc(summary: dict, sources: Sequence[str], loss_pts: float = 1.0) -> str:
    """``docs/results.md``: the current results page, generated from a `build` summary (the tables of
    `render_build`) with the commands that make them; nothing in it is written by hand."""
    lines = ["# Results", "",
             "Generated by `python paper_figures/summary.py --doc docs/results.md` from `results/summary.json` "
             "(built from " + ", ".join(f"`{s}`" for s in sources) + "); do not edit by hand. The grid is made by "
             "`python experiments/tradeoff.py` (its command line is in `experiments/README.md`); the cost model's "
             "formulas, constants and validation are in [`hwmodel.md`](hwmodel.md); earlier tables and dated "
             "studies, each as measured at the time, are in the log, [log/results.md](log/results.md).", "",
             "How to read it: a modeled reduction is `codesign.hwmodel`'s cost of the best dense FP32 configuration "
             "on that target divided by the hardened model's; the measured CPU latency reduction is the deployed "
             "program timed on this 2-core CPU beside the dense FP32 program (`codesign.deploy`). A reduction near "
             "1x is a result, not a gap in the table: a Cora model on an H100 is launch-bound (a fixed ~8 µs per "
             "kernel on the fitted preset), so pruning and low precision save little there. The evidence behind "
             "each target's preset is what `codesign validate` prints. A (dataset, model) not listed below has not "
             "been run under these rules (validation selection, >= 5 seeds, tuned baselines) yet; its earlier, "
             "test-selected numbers are in the log.", ""]
    lines += render_build(summary, loss_pts)[2:]
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
    parser.add_argument("--doc", type=Path, default=None,
                        help="also write the results page (render_doc), e.g. docs/results.md")
    parser.add_argument("--loss-pts", type=float, default=1.0,
                        help="validation accuracy loss allowed, percentage points (default 1)")
    args = parser.parse_args(argv)
    files = args.files or find_inputs(args.results, args.quick)
    if not files:
        raise SystemExit(f"summary.py: no *_tradeoff.jsonl in {args.results}")
    inputs = [(f, fronts.load_or_exit(f, "summary.py")) for f in files]
    md = args.md or args.results / "summary.md"
    for path in write(inputs, md, md.with_suffix(".json"), args.loss_pts):
        print(f"wrote {path}")
    if args.doc is not None:
        built = build([p for _, pts in inputs for p in pts], args.loss_pts)
        write_text_atomic(args.doc, render_doc(built, [_rel(f) for f in files], args.loss_pts))
        print(f"wrote {args.doc}")
    return md


if __name__ == "__main__":
    main()
