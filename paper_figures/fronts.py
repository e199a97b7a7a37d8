"""Tradeoff results as points, Pareto fronts per method and family, and front comparisons.

Input: ``results/<dataset>_tradeoff.jsonl`` written by ``experiments/tradeoff.py``, one finished
run per line::

    {"key": "...", "config": {"dataset": "cora", "model": "gcn", "method": "codesign",
                               "hw": "h100", "cost_weight": 0.1, "budget": null, "seed": 0, ...},
     "test_accuracy": 0.81, "val_accuracy": 0.79,
     "modeled": {"latency_s": .., "energy_j": .., "dram_bytes": ..},        # hardened model
     "dense_modeled": {"latency_s": .., "energy_j": .., "dram_bytes": ..},  # dense FP32, same hw
     "breakdown": {"layer0/gemm": {...}, ...},        # CostReport.breakdown(hw) (optional)
     "dense_breakdown": {...},                         # same for the dense FP32 model (optional)
     "densities": {...}, "layer_bits": {...}, ...,
     "measured": {"latency_s": ..}, "dense_measured": {"latency_s": ..}}   # optional (--measure): this CPU

A record's method is the label in its config. A file whose records disagree on the cost-model or
reference version (``versions``, `codesign.experiment.grid_versions`) is refused in one line; re-price
old records with ``experiments/migrate_records.py``.

Runs that differ only in ``seed`` (also in nested config objects) are one point (mean ± std over seeds). Accuracies of points
are in percent; costs are modeled (J, s, bytes) and ``*_ratio`` is cost / dense FP32 cost on the
same hardware (lower is cheaper); a "reduction" is its inverse, dense cost / cost.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from codesign.experiment import PAPER_METHODS, grid_versions
from codesign.results import ResultsStore, config_key
from paper_figures.pareto import pareto_front

__all__ = ["CODESIGN_METHODS", "DENSE_METHOD", "FLAGSHIP", "COSTS", "family", "read_records", "load_tradeoff",
           "load_or_exit", "panels", "dense_point", "front", "best_reduction_within", "best_point_within",
           "representatives", "min_bits", "MIN_SEEDS", "seeds_needed"]

CODESIGN_METHODS = tuple(n for n, m in PAPER_METHODS.items() if m.family == "codesign")
DENSE_METHOD = "dense"
FLAGSHIP = "codesign"
# Display order: the registry's (`codesign.experiment.PAPER_METHODS`); methods not in it follow alphabetically.
METHOD_ORDER = tuple(PAPER_METHODS)
# Display order of hardware targets (GPU, then accelerators); others follow alphabetically.
HW_ORDER = ("h100", "a100", "cpu", "hygcn", "gnnear", "upmem", "hbm_pim")
# --cost name: (point field, dense field, ratio field, words); "measured": only points with measured runs
COSTS = {"energy": ("energy_j", "dense_energy_j", "energy_ratio", "modeled energy"),
         "latency": ("latency_s", "dense_latency_s", "latency_ratio", "modeled latency"),
         "measured": ("measured_latency_s", "dense_measured_latency_s", "measured_latency_ratio",
                      "measured CPU latency")}
MIN_SEEDS = 5
"""Seeds a point needs to be chosen or reported (issue 34: >= 5 seeds, sample std)."""
_MODELED = ("latency_s", "energy_j", "dram_bytes")
_STAGE_NUMBERS = ("latency_s", "energy_j", "compute_j", "dram_j", "onchip_j", "nmp_j", "link_j",
                  "macs", "dram_bytes", "nmp_bytes")


def family(method: str) -> str:
    """``"codesign"`` for the co-design family (`CODESIGN_METHODS`), ``"dense"`` for the dense
    reference, ``"ablation"`` for the flagship's ablations (registry family "ablation"),
    ``"baseline"`` for every other method."""
    if method in CODESIGN_METHODS:
        return "codesign"
    if method in PAPER_METHODS and PAPER_METHODS[method].family == "ablation":
        return "ablation"
    return "dense" if method == DENSE_METHOD else "baseline"


def method_sort_key(method: str) -> tuple[int, str]:
    """Sort key putting methods in `METHOD_ORDER` (unknown ones last, alphabetically)."""
    return (METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER), method)


# --------------------------------------------------------------------------- loading
def read_records(path: str | Path) -> list[tuple[int, dict]]:
    """The records of a JSONL results file with their 1-based line numbers.

    Records sharing a ``key`` are counted once (the last one wins). A torn last line is skipped
    with a warning (as `codesign.results.ResultsStore.records`).

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: naming the file and line, for a garbled line before the last one.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")  # FileNotFoundError for a missing file
    linenos = [i + 1 for i, ln in enumerate(text.split("\n")) if ln.strip()]
    records = ResultsStore(path).records()  # same parse rules; lines map one to one in order
    by_key: dict[str, tuple[int, dict]] = {}
    for lineno, rec in zip(linenos, records):
        by_key[str(rec.get("key", f"<no key, line {lineno}>"))] = (lineno, rec)
    return sorted(by_key.values(), key=lambda t: t[0])


def _number(obj: Any, field: str, where: str, *, positive: bool = False, allow_nan: bool = False) -> float:
    if isinstance(obj, bool) or not isinstance(obj, (int, float)):
        raise ValueError(f"{where}: field {field!r} must be a number, got {obj!r}")
    v = float(obj)
    if math.isnan(v) and allow_nan:
        return v
    if not math.isfinite(v) or (positive and v <= 0):
        raise ValueError(f"{where}: field {field!r} must be finite{' and > 0' if positive else ''}, got {obj!r}")
    return v


def _costs(rec: dict, name: str, where: str) -> dict[str, float]:
    obj = rec.get(name)
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: record has no {name!r} object")
    out = {}
    for f in _MODELED:
        if f not in obj:
            raise ValueError(f"{where}: record has no field '{name}.{f}'")
        out[f] = _number(obj[f], f"{name}.{f}", where, positive=(f != "dram_bytes"))
    return out


def _breakdown(rec: dict, name: str, where: str) -> dict | None:
    obj = rec.get(name)
    if obj is None:
        return None
    if not isinstance(obj, dict) or not obj:
        raise ValueError(f"{where}: field {name!r} must be a non-empty object of stages, got {obj!r}")
    out = {}
    for stage, s in obj.items():
        if not isinstance(s, dict):
            raise ValueError(f"{where}: '{name}.{stage}' must be an object, got {s!r}")
        row = {}
        for f in _STAGE_NUMBERS:
            if f not in s:
                raise ValueError(f"{where}: record has no field '{name}.{stage}.{f}'")
            row[f] = _number(s[f], f"{name}.{stage}.{f}", where)
            if row[f] < 0:
                raise ValueError(f"{where}: field '{name}.{stage}.{f}' must be >= 0, got {s[f]!r}")
        if not isinstance(s.get("on_nmp"), bool):
            raise ValueError(f"{where}: field '{name}.{stage}.on_nmp' must be true or false, got {s.get('on_nmp')!r}")
        row["on_nmp"] = s["on_nmp"]
        row["bound"] = str(s.get("bound", "?"))
        out[stage] = row
    return out


def _numbers_dict(rec: dict, name: str, where: str) -> dict[str, float]:
    obj = rec.get(name)
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: field {name!r} must be an object, got {obj!r}")
    return {k: _number(v, f"{name}.{k}", where) for k, v in obj.items() if v is not None}


def _parse(rec: dict, where: str) -> dict:
    config = rec.get("config")
    if not isinstance(config, dict):
        raise ValueError(f"{where}: record has no 'config' object")
    for f in ("dataset", "model", "method", "hw"):
        if not isinstance(config.get(f), str) or not config[f]:
            raise ValueError(f"{where}: field 'config.{f}' must be a non-empty string, got {config.get(f)!r}")
    for f in ("cost_weight", "budget", "keep", "round"):
        if config.get(f) is not None:
            _number(config[f], f"config.{f}", where)
    if not isinstance(rec.get("versions"), dict):
        raise ValueError(f"{where}: record has no 'versions' (priced before records carried the cost-model version; "
                         f"re-price it with experiments/migrate_records.py)")
    if "test_accuracy" not in rec:
        raise ValueError(f"{where}: record has no field 'test_accuracy'")
    acc = _number(rec["test_accuracy"], "test_accuracy", where, allow_nan=True)
    if not math.isnan(acc) and not 0.0 <= acc <= 1.0:
        raise ValueError(f"{where}: field 'test_accuracy' must be a fraction in [0, 1], got {acc!r}")
    val = rec.get("val_accuracy")
    val = math.nan if val is None else _number(val, "val_accuracy", where, allow_nan=True)
    chosen = rec.get("selected_epoch")
    if chosen is not None and (isinstance(chosen, bool) or not isinstance(chosen, int) or chosen < 0):
        raise ValueError(f"{where}: field 'selected_epoch' must be an integer >= 0, got {chosen!r}")
    measured = None
    if rec.get("measured") is not None:
        measured = {name: _number((rec.get(name) or {}).get("latency_s"), f"{name}.latency_s", where, positive=True)
                    for name in ("measured", "dense_measured")}
        if rec.get("modeled_local") is not None:  # the deployed programs as the CPU preset prices them
            measured.update({name: _number((rec.get(name) or {}).get("latency_s"), f"{name}.latency_s", where,
                                           positive=True) for name in ("modeled_local", "dense_modeled_local")})
    return {"config": config, "acc": acc, "val_acc": val, "measured": measured, "selected_epoch": chosen,
            "reference": rec["versions"].get("reference"),
            "modeled": _costs(rec, "modeled", where),
            "dense_modeled": _costs(rec, "dense_modeled", where),
            "breakdown": _breakdown(rec, "breakdown", where),
            "dense_breakdown": _breakdown(rec, "dense_breakdown", where),
            "densities": _numbers_dict(rec, "densities", where),
            "layer_bits": _numbers_dict(rec, "layer_bits", where)}


def _without_seed(config: dict) -> dict:
    """``config`` without its ``seed`` fields, at any depth (the nested ``train`` config of a
    tradeoff record repeats the seed)."""
    return {k: _without_seed(v) if isinstance(v, dict) else v for k, v in config.items() if k != "seed"}


def _mean_breakdown(items: list[dict | None]) -> dict | None:
    items = [b for b in items if b is not None]
    if not items:
        return None
    out = {}
    for stage in dict.fromkeys(s for b in items for s in b):  # first-seen order
        rows = [b[stage] for b in items if stage in b]
        row = {f: float(np.mean([r[f] for r in rows])) for f in _STAGE_NUMBERS}
        row["on_nmp"] = sum(r["on_nmp"] for r in rows) * 2 > len(rows)
        row["bound"] = Counter(r["bound"] for r in rows).most_common(1)[0][0]
        out[stage] = row
    return out


def _mean_dict(items: list[dict]) -> dict[str, float]:
    keys = dict.fromkeys(k for d in items for k in d)
    return {k: float(np.mean([d[k] for d in items if k in d])) for k in keys}


def load_tradeoff(path: str | Path) -> list[dict]:
    """Read a tradeoff JSONL and group its runs into points (one per config without ``seed``).

    Args:
        path: a JSONL file in the format of the module docstring.

    Returns:
        One dict per point, in file order of first appearance: ``dataset``, ``model``, ``hw``,
        ``method``, ``family`` (see `family`), the method's level ``cost_weight``/``budget``/
        ``keep`` (float or None) / ``round`` (UGS pruning round or None), ``config`` (without
        ``seed`` fields), ``reference`` (the records' ``versions.reference``, the definition of their
        dense reference), ``group_key``, ``n_seeds``, ``seeds``, ``lines`` (1-based
        line numbers), ``acc_pct``/``acc_pct_std`` (test accuracy in %, mean and sample std,
        ddof=1, 0 for one seed; NaN if a run diverged), ``val_acc_pct``, the means of
        ``energy_j``/``latency_s``/``dram_bytes`` (modeled) and of ``dense_energy_j``/
        ``dense_latency_s``/``dense_dram_bytes``, ``energy_ratio``/``latency_ratio`` (mean cost /
        mean dense cost), ``breakdown``/``dense_breakdown`` (per-stage means over seeds, or None),
        ``densities`` and ``layer_bits`` (means), ``n_measured`` (runs with measured CPU latency),
        ``measured_latency_s`` / ``dense_measured_latency_s`` (their means, s) and
        ``measured_latency_ratio`` (mean measured / mean dense measured; all three None without a
        measured run), ``modeled_local_latency_ratio`` (the same runs' deployed programs as the CPU
        preset prices them, ``modeled_local`` / ``dense_modeled_local``: the model beside the
        measurement; None unless every measured run records it), ``selected_epochs`` (the seeds' 0-based epochs kept by selection, sorted;
        those that record one) and ``epochs`` (the epochs trained: ``config.train.epochs``, or
        None). ``[]`` for an empty file.

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: ``"<file>:<line>: ..."`` naming the field, for a garbled line, a record
            without ``versions`` or ``config`` (with string ``dataset``/``model``/``method``/``hw``),
            ``test_accuracy`` (a fraction in [0, 1] or NaN; ``val_accuracy`` a number if present;
            ``selected_epoch`` an integer >= 0 if present), ``modeled``/``dense_modeled``
            costs (finite, latency and energy > 0), or with a malformed ``breakdown``; or
            ``"<file>: records disagree on <field> version: A vs B"`` (`codesign.experiment.grid_versions`).
    """
    path = Path(path)
    groups: dict[str, dict] = {}
    records = read_records(path)
    grid_versions(path, [rec for _, rec in records])
    for lineno, rec in records:
        run = _parse(rec, f"{path}:{lineno}")
        base = _without_seed(run["config"])
        g = groups.setdefault(config_key(base), {"config": base, "runs": [], "lines": [], "seeds": []})
        g["runs"].append(run)
        g["lines"].append(lineno)
        g["seeds"].append(run["config"].get("seed"))

    points = []
    for gkey, g in groups.items():
        runs, cfg = g["runs"], g["config"]
        acc = np.array([100.0 * r["acc"] for r in runs])
        val = [100.0 * r["val_acc"] for r in runs if not math.isnan(r["val_acc"])]
        mean = lambda which, f: float(np.mean([r[which][f] for r in runs]))
        p = {
            "dataset": cfg["dataset"], "model": cfg["model"], "hw": cfg["hw"], "method": cfg["method"],
            "family": family(cfg["method"]),
            "cost_weight": None if cfg.get("cost_weight") is None else float(cfg["cost_weight"]),
            "budget": None if cfg.get("budget") is None else float(cfg["budget"]),
            "keep": None if cfg.get("keep") is None else float(cfg["keep"]),
            "round": cfg.get("round"),
            "config": cfg, "group_key": gkey, "n_seeds": len(runs), "reference": runs[0]["reference"],
            "seeds": sorted(g["seeds"], key=lambda s: (s is None, s if isinstance(s, (int, float)) else 0)),
            "lines": g["lines"],
            "acc_pct": float(acc.mean()),
            "acc_pct_std": float(acc.std(ddof=1)) if len(acc) > 1 else 0.0,
            "val_acc_pct": float(np.mean(val)) if val else math.nan,
            "breakdown": _mean_breakdown([r["breakdown"] for r in runs]),
            "dense_breakdown": _mean_breakdown([r["dense_breakdown"] for r in runs]),
            "densities": _mean_dict([r["densities"] for r in runs]),
            "layer_bits": _mean_dict([r["layer_bits"] for r in runs]),
            "selected_epochs": sorted(r["selected_epoch"] for r in runs if r["selected_epoch"] is not None),
            "epochs": (cfg.get("train") or {}).get("epochs"),
        }
        for f in _MODELED:
            p[f] = mean("modeled", f)
            p[f"dense_{f}"] = mean("dense_modeled", f)
        p["energy_ratio"] = p["energy_j"] / p["dense_energy_j"]
        p["latency_ratio"] = p["latency_s"] / p["dense_latency_s"]
        meas = [r["measured"] for r in runs if r["measured"] is not None]
        p["n_measured"] = len(meas)
        p["measured_latency_s"] = float(np.mean([m["measured"] for m in meas])) if meas else None
        p["dense_measured_latency_s"] = float(np.mean([m["dense_measured"] for m in meas])) if meas else None
        p["measured_latency_ratio"] = p["measured_latency_s"] / p["dense_measured_latency_s"] if meas else None
        local = [m for m in meas if "modeled_local" in m]
        p["modeled_local_latency_ratio"] = (float(np.mean([m["modeled_local"] for m in local])
                                                  / np.mean([m["dense_modeled_local"] for m in local]))
                                            if local and len(local) == len(meas) else None)
        points.append(p)
    return points


def load_or_exit(path: Path, prog: str) -> list[dict]:
    """`load_tradeoff`, with a missing, malformed or empty file turned into SystemExit."""
    try:
        points = load_tradeoff(path)
    except FileNotFoundError as err:
        raise SystemExit(f"{prog}: results file not found: {path}") from err
    except ValueError as err:
        raise SystemExit(f"{prog}: {err}") from err
    if not points:
        raise SystemExit(f"{prog}: no records in {path}")
    return points


def hw_sort_key(hw: str) -> tuple[int, str]:
    """Sort key putting hardware names in `HW_ORDER` (unknown ones last, alphabetically)."""
    return (HW_ORDER.index(hw) if hw in HW_ORDER else len(HW_ORDER), hw)


def panels(points: Iterable[dict]) -> dict[tuple[str, str, str], list[dict]]:
    """Points grouped by ``(dataset, model, hw)``; keys sorted by dataset, model, then
    `hw_sort_key`; points in input order."""
    out: dict[tuple[str, str, str], list[dict]] = {}
    for p in points:
        out.setdefault((p["dataset"], p["model"], p["hw"]), []).append(p)
    return dict(sorted(out.items(), key=lambda kv: (kv[0][0], kv[0][1], hw_sort_key(kv[0][2]))))


def dense_point(points: Sequence[dict], min_seeds: int = MIN_SEEDS) -> dict | None:
    """The dense FP32 reference of one panel, chosen on validation accuracy (issue 34): among its
    ``dense`` points (one per search candidate of `experiments/tradeoff.py`) with at least
    ``min_seeds`` seeds (where none has that many: those with the most seeds), the one with the
    highest mean validation accuracy; a point without one ranks last, ties go to the first. Test
    accuracy plays no part. ``None`` if the panel has no dense run with a finite test accuracy.

    Raises:
        ValueError: ``min_seeds`` < 1.
    """
    if not (isinstance(min_seeds, int) and min_seeds >= 1):
        raise ValueError(f"dense_point: min_seeds must be an integer >= 1, got {min_seeds!r}")
    dense = [p for p in points if p["method"] == DENSE_METHOD and not math.isnan(p["acc_pct"])]
    if not dense:
        return None
    need = seeds_needed(dense, min_seeds)
    return max((p for p in dense if p["n_seeds"] >= need), key=_val_key)


def seeds_needed(points: Sequence[dict], min_seeds: int = MIN_SEEDS) -> int:
    """The seeds a point of ``points`` (non-empty) needs to be chosen by the figures and the
    sensitivity study: ``min_seeds``, or the most any of them has where none has that many.
    (`paper_figures.summary.build` keeps the strict rule: a point with fewer is listed, never
    chosen.)"""
    return min(min_seeds, max(p["n_seeds"] for p in points))


def _val_key(p: dict) -> float:
    """Mean validation accuracy as a sort key (NaN ranks last)."""
    return -math.inf if math.isnan(p["val_acc_pct"]) else p["val_acc_pct"]


# --------------------------------------------------------------------------- fronts
def front(points: Sequence[dict], cost: str = "energy") -> list[dict]:
    """The Pareto front (lower cost ratio, higher mean accuracy) of ``points``, cheapest first.

    Points with NaN accuracy are left out (with a warning).

    Args:
        points: points from `load_tradeoff` (normally of one panel: one dataset, model, hw).
        cost: ``"energy"`` or ``"latency"`` (the ``*_ratio`` field is the cost).

    Raises:
        KeyError: for an unknown ``cost``.
    """
    ratio = COSTS[cost][2]
    ok = [p for p in points if not math.isnan(p["acc_pct"])]
    if len(ok) < len(points):
        warnings.warn(f"{len(points) - len(ok)} point(s) with NaN accuracy left out of the front",
                      RuntimeWarning, stacklevel=2)
    idx = pareto_front([p[ratio] for p in ok], [p["acc_pct"] for p in ok])
    return [ok[i] for i in idx]


def best_reduction_within(points: Sequence[Sequence[float]], dense_acc: float,
                          loss_pts: float = 1.0) -> tuple[int, float] | None:
    """The largest cost reduction among points within ``loss_pts`` of dense accuracy.

    Args:
        points: sequence of ``(reduction, accuracy)`` pairs: reduction = dense cost / cost
            (> 1 is cheaper than dense), accuracy in percent.
        dense_acc: dense FP32 accuracy in percent.
        loss_pts: allowed accuracy loss in percentage points (>= 0); a point qualifies when
            ``accuracy >= dense_acc - loss_pts`` (1e-9 slack for rounding).

    Returns:
        ``(index, reduction)`` of the qualifying point with the largest reduction (ties: the more
        accurate, then the first), or ``None`` if no point qualifies. NaN accuracies never qualify.

    Raises:
        ValueError: if ``loss_pts`` is negative or NaN, or ``dense_acc`` is NaN.
    """
    if not loss_pts >= 0:
        raise ValueError(f"best_reduction_within: loss_pts must be >= 0, got {loss_pts!r}")
    if math.isnan(dense_acc):
        raise ValueError("best_reduction_within: dense_acc is NaN")
    best = None
    for i, (red, acc) in enumerate(points):
        red, acc = float(red), float(acc)
        if math.isnan(acc) or math.isnan(red) or acc < dense_acc - loss_pts - 1e-9:
            continue
        if best is None or (red, acc) > (best[1], best[2]):
            best = (i, red, acc)
    return None if best is None else (best[0], best[1])


def best_point_within(points: Sequence[dict], reference_val_pct: float, cost: str = "energy",
                      loss_pts: float = 1.0, min_seeds: int = MIN_SEEDS) -> dict | None:
    """The point (from `load_tradeoff`) of the largest ``cost`` reduction (1 / ``*_ratio``) among
    those with at least ``min_seeds`` seeds whose mean *validation* accuracy is within ``loss_pts``
    of ``reference_val_pct`` (the reference's, `dense_point`; `best_reduction_within` on
    (reduction, validation accuracy) pairs: ties go to the more accurate on validation, then the
    first). Test accuracy plays no part (issue 34). ``None`` if no point qualifies."""
    ratio = COSTS[cost][2]
    ok = [p for p in points if p["n_seeds"] >= min_seeds and not math.isnan(p["acc_pct"])]
    hit = best_reduction_within([(1.0 / p[ratio], p["val_acc_pct"]) for p in ok], reference_val_pct, loss_pts)
    return None if hit is None else ok[hit[0]]


def representatives(points: Sequence[dict], loss_pts: float = 1.0, min_seeds: int = MIN_SEEDS) -> dict[str, dict | None]:
    """The points the breakdown and roofline figures compare, for one panel (dataset, model, hw),
    every one chosen on validation accuracy as `paper_figures.summary.build` chooses.

    Returns:
        ``{"dense": ..., "int8": ..., "codesign": ..., "ugs_int8": ...}``: the dense reference
        (`dense_point`); the ``int8`` point (one per search candidate) with the highest mean
        validation accuracy among those with the most seeds; the co-design-family point of the
        largest energy reduction within ``loss_pts`` of the reference's validation accuracy
        (`best_point_within`, ``min_seeds`` seeds, or the most any such point has where none has
        that many); the ``ugs_int8`` point closest in energy ratio (log distance) to that
        co-design point (or, without one, `best_point_within` of the ``ugs_int8`` points).
        Missing ones are ``None``.
    """
    dense = dense_point(points, min_seeds)
    ok = [p for p in points if not math.isnan(p["acc_pct"])]
    int8 = [p for p in ok if p["method"] == "int8"]
    ugs = [p for p in ok if p["method"] == "ugs_int8"]
    cod = [p for p in ok if p["family"] == "codesign"]

    def within(pts):
        if dense is None or not pts or math.isnan(dense["val_acc_pct"]):
            return None
        return best_point_within(pts, dense["val_acc_pct"], "energy", loss_pts, seeds_needed(pts, min_seeds))

    best_cod = within(cod)
    if best_cod is not None and ugs:
        target = math.log(best_cod["energy_ratio"])
        best_ugs = min(ugs, key=lambda p: abs(math.log(p["energy_ratio"]) - target))
    else:
        best_ugs = within(ugs)
    top = max((p["n_seeds"] for p in int8), default=0)
    return {"dense": dense,
            "int8": max((p for p in int8 if p["n_seeds"] == top), key=_val_key) if int8 else None,
            "codesign": best_cod, "ugs_int8": best_ugs}


def min_bits(point: dict) -> float:
    """The narrowest bit-width in a point's ``layer_bits`` (32.0 when it has none)."""
    return min(point["layer_bits"].values(), default=32.0)


def tradeoff_figure_main(argv: Sequence[str] | None, prog: str, doc: str, draw, loss_help: str) -> list[Path]:
    """The command line of a figure drawn from one tradeoff JSONL: ``RESULTS [--loss-pts X]
    [--out DIR] [--dpi N]``; ``draw(points, out, stem, loss_pts, dpi) -> (written, notes)``.
    Prints the notes and the written paths and returns the paths.

    Raises:
        SystemExit: naming the file (and line), if the input is missing, malformed or empty.
    """
    import argparse

    from paper_figures.common import add_common_args, print_written
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n")[0])
    parser.add_argument("results", type=Path, help="results/<dataset>_tradeoff.jsonl")
    parser.add_argument("--loss-pts", type=float, default=1.0, help=loss_help)
    add_common_args(parser)
    args = parser.parse_args(argv)
    points = load_or_exit(args.results, prog)
    written, notes = draw(points, args.out, args.results.stem, args.loss_pts, args.dpi)
    return print_written(written, notes)
