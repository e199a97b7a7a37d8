"""Aggregation kernel speedups over XLA gather + segment_sum (forward, and forward + backward).

Usage (from the repository root)::

    python paper_figures/kernels.py [FILE.json ...] [--results DIR] [--out DIR]

Reads the JSON written by ``experiments/kernel_bench.py`` (without FILE arguments:
``<results>/kernel_bench_*.json`` and ``<results>/gpu/kernel_bench*.json``, one of ``X.json`` /
``X_quick.json``, the full one preferred)::

    {"device": "cpu", "backend": "cpu", ...,
     "rows": [{"graph": "cora", "features": 64, "tile_keep": 1.0, "impl": "segment"|"bsr_xla"|...,
               "forward_ms": float, "forward_backward_ms": float, ...}, ...]}

Per file a column of two panels (forward; forward + backward): grouped bars per
(graph, features, tile_keep), one bar per implementation, height = time of ``segment`` / time of
the implementation (log axis; above 1 = faster than segment_sum). Writes
``<out>/kernel_speedups.png`` and ``.pdf``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

if __package__ in (None, ""):  # run as a script: make `paper_figures` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paper_figures.common import (DPI, dedupe_legend, find_results, is_quick, json_results_main,  # noqa: E402
                                  legend_right, load_json_object, new_figure, save_figure)

__all__ = ["BASELINE_IMPL", "find_inputs", "speedups", "draw", "main"]

BASELINE_IMPL = "segment"
_TIMES = (("forward_ms", "forward"), ("forward_backward_ms", "forward + backward"))


def find_inputs(results: Path, quick: bool = False) -> list[Path]:
    """``results/kernel_bench_*.json`` and ``results/gpu/kernel_bench*.json`` that hold timed rows
    (``"rows"``; a file of modeled predictions only, ``kernel_bench_predictions_*``, has none), one
    per result (the ``_quick`` one only when ``quick`` or when it has no full partner)."""
    import json
    return [p for p in find_results(results, "kernel_bench", quick) if "rows" in json.loads(p.read_text())]


def speedups(path: Path) -> tuple[dict, list[str]]:
    """Speedups over ``segment`` of every row of one benchmark file.

    Returns:
        ``({(graph, features, tile_keep): {impl: {"forward_ms": x, "forward_backward_ms": y}}},
        notes)``: x and y are ``segment time / impl time`` (> 1 = faster; NaN where the impl has
        no backward); groups without a
        ``segment`` row are left out and named in the notes.

    Raises:
        ValueError: naming the file and row index, if the file is not a JSON object with a
            non-empty ``rows`` list, or a row lacks ``graph``/``impl`` (strings), ``features``,
            ``tile_keep`` or positive finite ``forward_ms``/``forward_backward_ms`` (the latter may
            be null for forward-only kernels such as ``pallas_int8``; its speedup is then NaN).
    """
    obj = load_json_object(path)
    rows = obj.get("rows")
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{path}: expected a non-empty 'rows' list")
    groups: dict[tuple, dict[str, dict]] = {}
    for i, r in enumerate(rows):
        where = f"{path}: rows[{i}]"
        if not isinstance(r, dict):
            raise ValueError(f"{where}: expected an object, got {r!r}")
        for f in ("graph", "impl"):
            if not isinstance(r.get(f), str):
                raise ValueError(f"{where}: field {f!r} must be a string, got {r.get(f)!r}")
        for f in ("features", "tile_keep", "forward_ms", "forward_backward_ms"):
            v = r.get(f)
            if f == "forward_backward_ms" and v is None:  # forward-only kernels (int8 features)
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{where}: field {f!r} must be a positive number, got {v!r}")
        key = (r["graph"], int(r["features"]), float(r["tile_keep"]))
        groups.setdefault(key, {})[r["impl"]] = {f: math.nan if r[f] is None else float(r[f]) for f, _ in _TIMES}
    out, notes = {}, []
    for key, impls in groups.items():
        base = impls.get(BASELINE_IMPL)
        if base is None:
            notes.append(f"{path}: {key} has no {BASELINE_IMPL!r} row; left out")
            continue
        out[key] = {impl: {f: base[f] / t[f] for f, _ in _TIMES} for impl, t in impls.items()}
    return out, notes


def _base(path: Path) -> str:
    return path.stem[: -len("_quick")] if is_quick(path) else path.stem


def _label(path: Path, obj_device: str | None) -> str:
    name = _base(path).replace("kernel_bench", "").strip("_") or path.parent.name
    if obj_device and obj_device not in name:
        name = f"{name} ({obj_device})"
    return name + (" (quick run)" if is_quick(path) else "")


def draw(files: Sequence[Path], out: Path, dpi: int = DPI) -> tuple[list[Path], list[str]]:
    """Draw ``<out>/kernel_speedups.{png,pdf}``, one column per benchmark file.

    Returns:
        ``(written paths, notes)``.

    Raises:
        ValueError: as `speedups`; if ``files`` is empty or no file has a usable group.
    """
    if not files:
        raise ValueError("kernels: no input files")
    data, notes = [], []
    for f in files:
        s, n = speedups(Path(f))
        notes += n
        if s:
            data.append((Path(f), load_json_object(f).get("device"), s))
    if not data:
        raise ValueError(f"kernels: no group with a {BASELINE_IMPL!r} row in {[str(f) for f in files]}")
    impls = list(dict.fromkeys(i for _, _, s in data for g in s.values() for i in g if i != BASELINE_IMPL))
    colors = {impl: f"C{k % 10}" for k, impl in enumerate(impls)}
    width = max(3.5, 0.5 + 0.35 * max(len(s) * max(len(impls), 1) for _, _, s in data))
    fig, axes = new_figure(2, len(data), panel_w_in=width, panel_h_in=2.8)
    for j, (path, device, s) in enumerate(data):
        keys = sorted(s)
        x = np.arange(len(keys))
        w = 0.8 / max(len(impls), 1)
        for row, (field, words) in enumerate(_TIMES):
            ax = axes[row, j]
            for k, impl in enumerate(impls):
                h = [s[g][impl][field] if impl in s[g] else np.nan for g in keys]
                xs = x - 0.4 + (k + 0.5) * w
                ax.bar(xs, h, width=w, color=colors[impl], label=impl)
                for xi, hi in zip(xs, h):
                    if np.isfinite(hi):
                        ax.annotate(f"{hi:.2g}", (xi, hi), ha="center", va="bottom", fontsize=5,
                                    xytext=(0, 1), textcoords="offset points")
            ax.axhline(1.0, color="k", lw=0.8, label=f"{BASELINE_IMPL} (XLA segment_sum)")
            ax.set_yscale("log")
            ax.set_xticks(x, [f"{g}\nF={f} keep={k:g}" for g, f, k in keys], fontsize=7)
            ax.set_ylabel(f"speedup, {words}", fontsize=8)
            ax.grid(True, axis="y", which="both", alpha=0.25)
        axes[0, j].set_title(_label(path, device), fontsize=9)
    h, lab = dedupe_legend(*axes[0, 0].get_legend_handles_labels())
    for ax in axes.flat:
        h2, l2 = ax.get_legend_handles_labels()
        h, lab = dedupe_legend(h + h2, lab + l2)
    legend_right(fig, h, lab)
    fig.suptitle("aggregation kernels: speedup over XLA gather + segment_sum (higher is faster)", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, out, "kernel_speedups", dpi), notes


def main(argv: Sequence[str] | None = None) -> list[Path]:
    """Command line: see the module docstring (`common.json_results_main`). Prints the notes and
    the written paths; returns the written PNG and PDF paths.

    Raises:
        SystemExit: if no input file is found, or one is missing or malformed (naming it).
    """
    return json_results_main(argv, "kernels.py", __doc__, "kernel_bench", draw)

if __name__ == "__main__":
    main()
