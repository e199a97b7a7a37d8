"""Helpers shared by the figure scripts: Agg figures, atomic PNG + PDF output, input discovery.

Figures are built on a `matplotlib.figure.Figure` with its own Agg canvas (pyplot's global
backend is never touched), so the scripts run headless and in the same process as the tests.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Iterable, Sequence

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RESULTS = REPO_ROOT / "results"
DEFAULT_OUT = Path(__file__).resolve().parent / "out"
DPI = 200  # PNG resolution of the paper figures
QUICK_DPI = 60  # PNG resolution of --quick smoke runs
QUICK_SUFFIX = "_quick"

__all__ = ["REPO_ROOT", "DEFAULT_RESULTS", "DEFAULT_OUT", "DPI", "QUICK_DPI", "new_figure",
           "save_figure", "load_json_object", "prefer_quick_or_full", "add_common_args"]


def new_figure(nrows: int, ncols: int, panel_w_in: float = 4.2, panel_h_in: float = 3.4,
               **subplot_kw):
    """A figure of ``nrows x ncols`` panels on an Agg canvas.

    Args:
        nrows, ncols: panel grid (>= 1 each).
        panel_w_in, panel_h_in: size of one panel in inches.
        subplot_kw: passed to `Figure.subplots` (e.g. ``sharey=True``).

    Returns:
        ``(fig, axes)`` with ``axes`` a 2-D numpy array of Axes, shape ``(nrows, ncols)``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(panel_w_in * ncols, panel_h_in * nrows))
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, **subplot_kw)
    return fig, axes


def save_figure(fig, out_dir: str | os.PathLike, name: str, dpi: int = DPI) -> list[Path]:
    """Write ``<out_dir>/<name>.png`` and ``.pdf`` atomically (temporary file, then `os.replace`).

    Args:
        fig: a `matplotlib.figure.Figure`.
        out_dir: output folder (created).
        name: file name without extension.
        dpi: PNG resolution (dots per inch).

    Returns:
        ``[png_path, pdf_path]``.

    Raises:
        OSError: if a file cannot be written (an existing file is left as it was).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in ("png", "pdf"):
        path = out / f"{name}.{fmt}"
        tmp = out / f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.{fmt}.tmp"
        try:
            fig.savefig(tmp, format=fmt, dpi=dpi, bbox_inches="tight",
                        metadata={"CreationDate": None} if fmt == "pdf" else None)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        paths.append(path)
    return paths


def load_json_object(path: str | os.PathLike) -> dict:
    """Read a JSON file holding one object.

    Raises:
        ValueError: naming the file (and the line/column of a syntax error), if the file is not
            valid JSON or does not hold an object.
        FileNotFoundError: if the file does not exist.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{err.lineno}: not valid JSON ({err.msg}, column {err.colno})") from err
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _base_stem(path: Path) -> str:
    stem = path.stem
    return stem[: -len(QUICK_SUFFIX)] if stem.endswith(QUICK_SUFFIX) else stem


def prefer_quick_or_full(paths: Iterable[Path], quick: bool) -> list[Path]:
    """One file per result: of ``X.ext`` and ``X_quick.ext`` in the same folder keep one.

    Args:
        paths: candidate files.
        quick: keep the ``_quick`` file when both exist (else the full one). A file whose
            partner is absent is always kept.

    Returns:
        The kept paths, sorted.
    """
    by_base: dict[tuple[Path, str, str], dict[bool, Path]] = {}
    for p in paths:
        p = Path(p)
        by_base.setdefault((p.parent, _base_stem(p), p.suffix), {})[p.stem.endswith(QUICK_SUFFIX)] = p
    kept = []
    for pair in by_base.values():
        kept.append(pair.get(quick, pair.get(not quick)))
    return sorted(kept)


def is_quick(path: Path) -> bool:
    """Whether a results file is the output of an experiment's ``--quick`` run."""
    return Path(path).stem.endswith(QUICK_SUFFIX)


def add_common_args(parser, out_default: Path = DEFAULT_OUT) -> None:
    """Add ``--out DIR`` and ``--dpi N`` to an `argparse.ArgumentParser`."""
    parser.add_argument("--out", type=Path, default=out_default,
                        help=f"output folder (default {out_default})")
    parser.add_argument("--dpi", type=int, default=DPI, help=f"PNG resolution (default {DPI})")


def find_results(results: Path, prefix: str, quick: bool = False) -> list[Path]:
    """``results/<prefix>_*.json`` and ``results/gpu/<prefix>*.json``, one per result (the
    ``_quick`` one only when ``quick`` or when it has no full partner)."""
    found = list(results.glob(f"{prefix}_*.json")) + list((results / "gpu").glob(f"{prefix}*.json"))
    return prefer_quick_or_full(found, quick)


def json_results_main(argv: Sequence[str] | None, prog: str, doc: str, prefix: str, draw) -> list[Path]:
    """The command line of a figure drawn from ``<prefix>_*.json`` result files: ``FILE ...`` or
    ``--results DIR [--quick]`` (`find_results`), ``--out``, ``--dpi``; ``draw(files, out, dpi)
    -> (written paths, notes)``. Prints the notes and the written paths and returns the paths.

    Raises:
        SystemExit: no input file found, or ``draw`` raised ValueError / FileNotFoundError (its
            message names the file).
    """
    import argparse
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help=f"{prefix} JSON files")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                        help=f"folder searched when no FILE is given (default {DEFAULT_RESULTS})")
    parser.add_argument("--quick", action="store_true", help="prefer the _quick result files")
    add_common_args(parser)
    args = parser.parse_args(argv)
    files = args.files or find_results(args.results, prefix, args.quick)
    if not files:
        raise SystemExit(f"{prog}: no {prefix}_*.json in {args.results} or its gpu/")
    try:
        written, notes = draw(files, args.out, args.dpi)
    except (ValueError, FileNotFoundError) as err:
        raise SystemExit(f"{prog}: {err}") from err
    return print_written(written, notes)


def print_written(written: list[Path], notes: Sequence[str] = ()) -> list[Path]:
    """Prints each note (``note: ...``) and each written path (``wrote ...``); returns ``written``.
    The closing lines of every figure script's ``main``."""
    for n in notes:
        print(f"note: {n}")
    for p in written:
        print(f"wrote {p}")
    return written


def save_panel_figure(fig, out_dir: str | os.PathLike, stem: str, dataset: str, model: str, what: str,
                      several: bool, dpi: int = DPI) -> list[Path]:
    """Lay out and save one (dataset, model) figure of a tradeoff file as
    ``<stem>_<dataset>_<model>_<what>`` when the file holds several datasets (``several``), else
    ``<stem>_<model>_<what>`` (`save_figure`: PNG and PDF, atomically): the naming every
    per-panel figure here (tradeoff, ablation, breakdown, roofline) uses.

    Raises:
        OSError: as `save_figure`.
    """
    fig.tight_layout()
    name = f"{stem}_{dataset}_{model}_{what}" if several else f"{stem}_{model}_{what}"
    return save_figure(fig, out_dir, name, dpi)


def legend_right(fig, handles: Sequence, labels: Sequence[str]) -> None:
    """One legend for the whole figure, outside it on the right (centred vertically, small, no
    frame): the layout every multi-panel figure here uses."""
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False)


def dedupe_legend(handles: Sequence, labels: Sequence[str]) -> tuple[list, list[str]]:
    """Handles and labels with repeated labels dropped (first kept), order preserved."""
    seen: dict[str, object] = {}
    for h, lab in zip(handles, labels):
        if lab and not lab.startswith("_") and lab not in seen:
            seen[lab] = h
    return list(seen.values()), list(seen)


def method_style(method: str) -> dict:
    """``{"color", "marker", "label"}`` of a method (`paper_figures.styles.method_style`: its
    `STYLES` entry, a grey dot labelled by name if unknown)."""
    from paper_figures.styles import method_style as style

    return style(method)
