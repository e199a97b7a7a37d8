"""Accuracy vs modeled cost (energy or latency): the co-design Pareto figure.

Usage (from the repository root)::

    python paper_figures/pareto.py results/<name>.jsonl [--out DIR] [--x energy|latency]

Reads the JSONL written by the sweep (one finished training run per line)::

    {"key": "...", "config": {"dataset": "cora", "model": "gcn", "hw": "h100",
                               "cost_weight": 0.1, "bits": 8, "seed": 0, ...},
     "test_accuracy": 0.815, "val_accuracy": 0.79,
     "modeled": {"latency_s": ..., "energy_j": ..., "dram_bytes": ...},
     "dense_modeled": {"latency_s": ..., "energy_j": ..., "dram_bytes": ...},
     "code_version": "...", "time": "..."}

groups runs that differ only in ``seed``, draws test accuracy (%, mean ± std over seeds) against
modeled cost (log axis) with the Pareto front as a step line and the dense FP32 reference, saves
``<out>/<stem>_pareto.png`` and ``.pdf`` (``out`` defaults to ``paper_figures/out/``), and prints
a markdown table of the front.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from codesign.results import ResultsStore, config_key

__all__ = ["load_points", "pareto_front", "dense_reference", "front_table", "main"]

DEFAULT_OUT = Path(__file__).resolve().parent / "out"

_X_FIELDS = {
    # --x value: (point field, dense field, axis label, table column, reduction column)
    "energy": ("energy_j", "dense_energy_j", "Modeled energy (J)", "energy (J)",
               "energy reduction vs dense"),
    "latency": ("latency_s", "dense_latency_s", "Modeled latency (s)", "latency (s)",
                "speedup vs dense"),
}


# --------------------------------------------------------------------------- loading
def _get_number(rec: dict, path: tuple[str, ...], where: str, required: bool = True) -> float:
    obj: Any = rec
    for k in path:
        if not isinstance(obj, dict) or k not in obj:
            if required:
                raise ValueError(f"{where}: record has no field {'.'.join(path)!r}")
            return math.nan
        obj = obj[k]
    try:
        return float(obj) if obj is not None else math.nan
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: field {'.'.join(path)!r} is not a number: {obj!r}") from err


def _nanmean(values: Sequence[float]) -> float:
    arr = np.asarray(values, dtype=float)
    arr = arr[~np.isnan(arr)]
    return float(arr.mean()) if arr.size else math.nan


def load_points(path: str | Path) -> list[dict]:
    """Group the runs of a results JSONL by configuration without ``seed``.

    Records with the same ``key`` are counted once (the last one wins), so a run that was
    recorded twice does not count as two seeds.

    Args:
        path: a JSONL results file in the sweep's record format (see the module docstring).

    Returns:
        One dict per group, sorted by modeled energy (then by group key), with fields
        ``group_key`` (:func:`codesign.results.config_key` of the config minus ``seed``),
        ``config`` (the config minus ``seed``), ``n_seeds``, ``seeds`` (sorted),
        ``acc_mean``/``acc_std`` (test accuracy as stored, normally a fraction; ``acc_std`` is
        the sample standard deviation, ddof=1, and 0.0 for a single seed), ``val_acc_mean``
        (NaN if absent), ``energy_j``/``latency_s`` (means of ``modeled``), and
        ``dense_energy_j``/``dense_latency_s`` (means of ``dense_modeled``; NaN if absent).
        An empty list if the file is missing or has no records.

    Raises:
        ValueError: naming the file and record key, if a record lacks ``config`` (a dict),
            ``test_accuracy``, ``modeled.energy_j`` or ``modeled.latency_s``, or has a
            non-numeric value there; or as :meth:`codesign.results.ResultsStore.records` for a
            garbled line.
    """
    path = Path(path)
    by_key: dict[str, dict] = {}
    for i, rec in enumerate(ResultsStore(path).records()):
        by_key[str(rec.get("key", f"<line-record {i}>"))] = rec

    groups: dict[str, dict] = {}
    for key, rec in by_key.items():
        where = f"{path} (record key {key})"
        config = rec.get("config")
        if not isinstance(config, dict):
            raise ValueError(f"{where}: record has no 'config' object")
        base = {k: v for k, v in config.items() if k != "seed"}
        gkey = config_key(base)
        g = groups.setdefault(gkey, {"config": base, "seeds": [], "acc": [], "val": [],
                                     "energy": [], "latency": [], "d_energy": [],
                                     "d_latency": []})
        g["seeds"].append(config.get("seed"))
        g["acc"].append(_get_number(rec, ("test_accuracy",), where))
        g["val"].append(_get_number(rec, ("val_accuracy",), where, required=False))
        g["energy"].append(_get_number(rec, ("modeled", "energy_j"), where))
        g["latency"].append(_get_number(rec, ("modeled", "latency_s"), where))
        g["d_energy"].append(_get_number(rec, ("dense_modeled", "energy_j"), where, False))
        g["d_latency"].append(_get_number(rec, ("dense_modeled", "latency_s"), where, False))

    points = []
    for gkey, g in groups.items():
        acc = np.asarray(g["acc"], dtype=float)
        seeds = g["seeds"]
        try:
            seeds = sorted(seeds)
        except TypeError:
            pass
        points.append({
            "group_key": gkey,
            "config": g["config"],
            "n_seeds": len(acc),
            "seeds": seeds,
            "acc_mean": float(acc.mean()),
            "acc_std": float(acc.std(ddof=1)) if len(acc) > 1 else 0.0,
            "val_acc_mean": _nanmean(g["val"]),
            "energy_j": float(np.mean(g["energy"])),
            "latency_s": float(np.mean(g["latency"])),
            "dense_energy_j": _nanmean(g["d_energy"]),
            "dense_latency_s": _nanmean(g["d_latency"]),
        })
    points.sort(key=lambda p: (_sort_num(p["energy_j"]), p["group_key"]))
    return points


def _sort_num(x: float) -> float:
    return math.inf if math.isnan(x) else x


# --------------------------------------------------------------------------- Pareto front
def pareto_front(costs: Sequence[float], accs: Sequence[float]) -> np.ndarray:
    """Indices of the non-dominated points (lower cost and higher accuracy are better).

    Point ``i`` is dominated if some ``j`` has ``costs[j] <= costs[i]`` and
    ``accs[j] >= accs[i]`` with at least one inequality strict. Exact duplicates do not dominate
    each other, so all copies of a non-dominated point are returned.

    Args:
        costs: 1-D array-like of costs (±inf allowed).
        accs: 1-D array-like of accuracies, same length as ``costs`` (±inf allowed).

    Returns:
        An int ``np.ndarray`` of indices into the inputs, sorted by cost ascending (ties, i.e.
        duplicates, by index). Along it, accuracy strictly increases between distinct points.
        Empty for empty inputs. O(n log n).

    Raises:
        ValueError: if the inputs are not 1-D, differ in length, or contain NaN.
    """
    c = np.asarray(costs, dtype=float)
    a = np.asarray(accs, dtype=float)
    if c.ndim != 1 or a.ndim != 1:
        raise ValueError(f"costs and accs must be 1-D, got shapes {c.shape} and {a.shape}")
    if c.shape != a.shape:
        raise ValueError(f"costs and accs differ in length: {c.shape[0]} vs {a.shape[0]}")
    if np.isnan(c).any() or np.isnan(a).any():
        raise ValueError("costs and accs must not contain NaN")
    n = c.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.intp)
    # sort by cost ascending, then accuracy descending; lexsort is stable (ties by index)
    order = np.lexsort((-a, c))
    cs, as_ = c[order], a[order]
    start = np.searchsorted(cs, cs, side="left")  # first position of each equal-cost group
    best_in_group = as_[start]  # accuracy is descending within a group
    prefix_max = np.maximum.accumulate(as_)
    best_cheaper = np.where(start > 0, prefix_max[np.maximum(start - 1, 0)], -np.inf)
    keep = (as_ == best_in_group) & (as_ > best_cheaper)
    return order[keep].astype(np.intp)


# --------------------------------------------------------------------------- figure helpers
def _is_quantized(config: dict) -> bool:
    """True if the config asks for any quantization (a ``*bits*`` field below 32, or a truthy
    ``quant``/``quantize``/``quantization`` field other than "none"/"fp32")."""
    for k, v in config.items():
        kl = k.lower()
        if "bits" in kl and v is not None:
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 32):
                return True
        if kl in ("quant", "quantize", "quantization") and v not in (None, False, 0, "", "none",
                                                                     "None", "fp32", "FP32"):
            return True
    return False


def _cost_weight(config: dict) -> float | None:
    cw = config.get("cost_weight")
    try:
        return float(cw) if cw is not None else None
    except (TypeError, ValueError):
        return None


def _label(config: dict) -> str:
    cw = _cost_weight(config)
    text = f"λ={cw:g}" if cw is not None else "λ=?"
    if config.get("bits") is not None:
        text += f", {config['bits']}b"
    return text


def dense_reference(points: list[dict], x: str = "energy") -> dict | None:
    """The dense FP32 reference point of a set of groups.

    Preferred: a group with ``cost_weight == 0``, no quantization (no ``*bits*`` field below 32)
    and no mask forced on (``edge_mask`` / ``feature_mask`` True); among several, the one with
    the most seeds. Otherwise the mean ``dense_modeled`` cost over all groups, with the accuracy
    of an unmasked ``cost_weight == 0`` group if there is one.

    Args:
        points: groups from :func:`load_points`.
        x: ``"energy"`` or ``"latency"``.

    Returns:
        ``{"x": cost, "acc_mean": float | None, "acc_std": float | None, "source": "group" |
        "dense_modeled"}``, or ``None`` if neither a dense group nor ``dense_modeled`` costs exist.

    Raises:
        KeyError: if ``x`` is not ``"energy"`` or ``"latency"``.
    """
    field, dense_field = _X_FIELDS[x][:2]
    # Runs with a mask forced on (edge_mask / feature_mask True) are not dense, even at weight 0.
    zero = [p for p in points if _cost_weight(p["config"]) == 0.0
            and not any(p["config"].get(k) is True for k in ("edge_mask", "feature_mask"))]
    dense = [p for p in zero if not _is_quantized(p["config"])]
    if dense:
        best = max(dense, key=lambda p: p["n_seeds"])
        return {"x": best[field], "acc_mean": best["acc_mean"], "acc_std": best["acc_std"],
                "source": "group"}
    ref_x = _nanmean([p[dense_field] for p in points])
    if math.isnan(ref_x):
        return None
    ref = {"x": ref_x, "acc_mean": None, "acc_std": None, "source": "dense_modeled"}
    if zero:
        best = max(zero, key=lambda p: p["n_seeds"])
        ref["acc_mean"], ref["acc_std"] = best["acc_mean"], best["acc_std"]
    return ref


def front_table(points: list[dict], front: Sequence[int], x: str = "energy",
                ref: dict | None = None) -> str:
    """A markdown table of the front's groups.

    Columns: cost weight, bits, test accuracy (% mean ± std, n seeds), cost, and the reduction
    vs dense (``dense cost / cost``; the group's own ``dense_modeled`` cost, or ``ref["x"]``
    when that is missing; "–" when neither is known).

    Args:
        points: groups from :func:`load_points`.
        front: indices into ``points`` (from :func:`pareto_front`), in cost order.
        x: ``"energy"`` or ``"latency"``.
        ref: the result of :func:`dense_reference` (optional).

    Returns:
        The table as a string (header, separator and one row per front point).
    """
    field, dense_field, _, col, red_col = _X_FIELDS[x]
    lines = [f"| cost weight | bits | test acc (%) | {col} | {red_col} |",
             "|---:|---:|---:|---:|---:|"]
    for i in front:
        p = points[i]
        cw = _cost_weight(p["config"])
        bits = p["config"].get("bits")
        dense = p[dense_field]
        if math.isnan(dense) and ref is not None:
            dense = ref["x"]
        cost = p[field]
        red = f"{dense / cost:.2f}x" if (not math.isnan(dense) and cost > 0) else "–"
        lines.append(
            f"| {'?' if cw is None else f'{cw:g}'} | {'–' if bits is None else bits} "
            f"| {100 * p['acc_mean']:.2f} ± {100 * p['acc_std']:.2f} (n={p['n_seeds']}) "
            f"| {cost:.4g} | {red} |"
        )
    return "\n".join(lines)


def _title(points: list[dict]) -> str:
    parts = []
    for k in ("dataset", "model", "hw"):
        vals = sorted({str(p["config"][k]) for p in points if k in p["config"]})
        parts.append(",".join(vals) if vals else "?")
    return " / ".join(parts)


def _draw(points: list[dict], front: np.ndarray, ref: dict | None, x: str, title: str,
          png: Path, pdf: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    field, _, xlabel, _, _ = _X_FIELDS[x]
    xs = np.array([p[field] for p in points], dtype=float)
    acc = np.array([100 * p["acc_mean"] for p in points], dtype=float)
    err = np.array([100 * p["acc_std"] for p in points], dtype=float)

    fig = Figure(figsize=(6.4, 4.4))
    FigureCanvasAgg(fig)  # Agg canvas; does not touch pyplot's global backend
    ax = fig.add_subplot()
    ax.errorbar(xs, acc, yerr=err, fmt="o", ms=5, capsize=3, color="C0", alpha=0.8,
                label="runs (mean ± std over seeds)")
    for p, xi, yi in zip(points, xs, acc):
        if np.isfinite(xi) and np.isfinite(yi):
            ax.annotate(_label(p["config"]), (xi, yi), textcoords="offset points",
                        xytext=(4, 4), fontsize=7)
    if len(front):
        ax.step(xs[front], acc[front], where="post", color="C3", lw=1.5, label="Pareto front")
        ax.plot(xs[front], acc[front], "o", ms=7, mfc="none", mec="C3")
    if ref is not None and np.isfinite(ref["x"]):
        ax.axvline(ref["x"], ls="--", lw=1, color="k", label="dense FP32")
        if ref["acc_mean"] is not None:
            ax.errorbar([ref["x"]], [100 * ref["acc_mean"]], yerr=[100 * (ref["acc_std"] or 0)],
                        fmt="*", ms=12, color="k", capsize=3)
    positive = xs[np.isfinite(xs)]
    if ref is not None and np.isfinite(ref["x"]):
        positive = np.append(positive, ref["x"])
    if positive.size and (positive > 0).all():
        ax.set_xscale("log")
    ax.margins(x=0.08)  # room for the rightmost annotation
    ax.set_xlabel(xlabel)
    ax.set_ylabel("Test accuracy (%)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(png, dpi=200)
    fig.savefig(pdf)


# --------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> tuple[Path, Path]:
    """Draw the accuracy-vs-modeled-cost figure for one results file and print the front.

    Args:
        argv: command-line arguments (``sys.argv[1:]`` when ``None``): ``results`` (a JSONL
            path), ``--out DIR`` (default ``paper_figures/out/``, created), ``--x
            energy|latency`` (default ``energy``).

    Returns:
        The paths of the written PNG and PDF (``<out>/<stem>_pareto.png`` / ``.pdf``).

    Raises:
        SystemExit: with a message if the file is missing, is not valid JSONL, lacks required
            fields, or has no records (and on bad arguments, via argparse).
    """
    parser = argparse.ArgumentParser(
        prog="pareto.py", description="Test accuracy vs modeled cost, with the Pareto front.")
    parser.add_argument("results", type=Path, help="results/<name>.jsonl")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"output folder (default {DEFAULT_OUT})")
    parser.add_argument("--x", choices=sorted(_X_FIELDS), default="energy",
                        help="cost on the x axis (default energy)")
    args = parser.parse_args(argv)

    path: Path = args.results
    if not path.is_file():
        raise SystemExit(f"pareto.py: results file not found: {path}")
    try:
        points = load_points(path)
    except ValueError as err:
        raise SystemExit(f"pareto.py: {err}") from err
    if not points:
        raise SystemExit(f"pareto.py: no records in {path}")

    field = _X_FIELDS[args.x][0]
    xs = np.array([p[field] for p in points], dtype=float)
    acc = np.array([p["acc_mean"] for p in points], dtype=float)
    valid = np.flatnonzero(np.isfinite(xs) & np.isfinite(acc))
    if len(valid) < len(points):
        print(f"note: {len(points) - len(valid)} group(s) with non-finite accuracy or cost are "
              "left out of the front", file=sys.stderr)
    front = valid[pareto_front(xs[valid], acc[valid])]
    ref = dense_reference(points, args.x)
    title = _title(points)

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    png = out / f"{path.stem}_pareto.png"
    pdf = out / f"{path.stem}_pareto.pdf"
    _draw(points, front, ref, args.x, title, png, pdf)

    n_runs = sum(p["n_seeds"] for p in points)
    print(f"## Pareto front ({args.x}) — {title} — {len(points)} configs, {n_runs} runs\n")
    print(front_table(points, front, args.x, ref))
    if ref is not None:
        acc_txt = ("" if ref["acc_mean"] is None
                   else f", acc {100 * ref['acc_mean']:.2f} ± {100 * ref['acc_std']:.2f} %")
        print(f"\ndense FP32 reference ({ref['source']}): {ref['x']:.4g}{acc_txt}")
    print(f"\nwrote {png}\nwrote {pdf}")
    return png, pdf


if __name__ == "__main__":
    main()
