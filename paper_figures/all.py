"""Draw every paper figure whose inputs exist, and write the summary table.

Usage (from the repository root)::

    python -m paper_figures [--results DIR] [--out DIR] [--quick] [--dpi N] [--summary PATH]
    python paper_figures/all.py ...                       # the same

Inputs under ``--results`` (default ``results/``) and what is drawn from them (into ``--out``,
default ``paper_figures/out/``; PNG + PDF each):

- ``<dataset>_tradeoff[_budget].jsonl`` (experiments/tradeoff.py): `tradeoff` (accuracy vs modeled energy and
  latency, a panel per hardware), `breakdown` (stacked energy), `roofline`, `ablation` (what each
  ingredient of the flagship buys), and `summary` (``<results>/summary.md`` and ``<results>/summary.json``);
- ``<dataset>_<model>_<hw>[_*].jsonl`` (``codesign sweep``): `pareto`;
- ``hwmodel_validation_*.json`` and ``gpu/hwmodel_validation*.json``: `validation`;
- ``kernel_bench_*.json`` and ``gpu/kernel_bench*.json``: `kernels`.

Of ``X`` and ``X_quick`` results the full one is used, or with ``--quick`` the quick one (CI's
smoke run: ``--quick`` also lowers the PNG resolution, and moves the default output to
``paper_figures/out/quick/`` and the summary into that folder, so that the committed figures
and ``results/summary.md`` are not overwritten). Prints what it wrote, what it skipped and why,
and what failed (a malformed input names its file and line); exits 1 if anything failed.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Callable, Sequence

if __package__ in (None, ""):  # run as a script: make `paper_figures` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paper_figures import ablation, breakdown, fronts, kernels, measured, summary, tradeoff, validation  # noqa: E402
from paper_figures.common import DEFAULT_OUT, DEFAULT_RESULTS, DPI, QUICK_DPI, prefer_quick_or_full  # noqa: E402

__all__ = ["run_all", "sweep_inputs", "main"]


def sweep_inputs(results: Path, quick: bool = False) -> list[Path]:
    """``<dataset>_<model>_<hw>[_<suffix>].jsonl`` files written by ``codesign sweep`` (``hw`` a
    preset name of `codesign.hwmodel.presets`), one of each ``X`` / ``X_quick`` pair."""
    from codesign.hwmodel import presets

    hw = "|".join(re.escape(h) for h in presets.names())
    pat = re.compile(rf"^[A-Za-z0-9-]+_[A-Za-z0-9-]+_({hw})(_[A-Za-z0-9_-]+)?\.jsonl$")
    return prefer_quick_or_full([p for p in results.glob("*.jsonl") if pat.match(p.name)
                                 and not summary.TRADEOFF_NAME.match(p.name)
                                 and not p.stem.removesuffix("_quick").endswith("_measured")
                                 and _has_modeled_costs(p)], quick)


def _has_modeled_costs(path: Path) -> bool:
    """Whether the first record of a JSONL file carries ``modeled`` costs (a sweep's records do;
    ``experiments/deploy_measure.py``'s measured-only records, which share the name pattern, do not)."""
    import json
    with open(path) as fh:
        first = fh.readline()
    try:
        return "modeled" in json.loads(first)
    except ValueError:
        return True  # let the figure report the malformed line


class _Report:
    def __init__(self) -> None:
        self.written: list[Path] = []
        self.skipped: list[str] = []
        self.failed: list[str] = []
        self.notes: list[str] = []

    def run(self, what: str, fn: Callable[[], object]) -> None:
        """Run one figure; collect the paths it returns, notes, and failures (SystemExit /
        ValueError / OSError carry the message naming the file)."""
        try:
            res = fn()
        except (SystemExit, ValueError, OSError, KeyError) as err:
            self.failed.append(f"{what}: {err}")
            print(f"FAILED {what}: {err}", file=sys.stderr)
            return
        if isinstance(res, tuple):
            res, notes = res
            self.notes += [f"{what}: {n}" for n in notes]
        self.written += [Path(p) for p in (res if isinstance(res, list) else [res])]


def run_all(results: Path, out: Path, quick: bool = False, dpi: int = DPI,
            summary_md: Path | None = None) -> _Report:
    """Draw every figure whose inputs exist under ``results`` into ``out`` (see the module
    docstring); write the summary to ``summary_md`` (default ``<results>/summary.md``).

    Returns:
        A report with ``written`` (paths), ``skipped`` and ``failed`` (messages) and ``notes``.
        Never raises for bad inputs: failures are collected.
    """
    rep = _Report()
    trade = summary.find_inputs(results, quick)
    if not trade:
        rep.skipped.append(f"tradeoff, breakdown, roofline, summary: no {results}/<dataset>_tradeoff[_budget].jsonl "
                           "(experiments/tradeoff.py writes it)")
    loaded = []
    for f in trade:
        try:
            pts = fronts.load_or_exit(f, "load")
        except SystemExit as err:
            rep.failed.append(f"{f.name}: {err}")
            print(f"FAILED {f.name}: {err}", file=sys.stderr)
            continue
        loaded.append((f, pts))
        stem = f.stem
        for cost in ("energy", "latency") + (("measured",) if any(p["n_measured"] for p in pts) else ()):
            rep.run(f"tradeoff {f.name} ({cost})", lambda c=cost: tradeoff.draw(pts, c, out, stem, dpi))
        if any(p["family"] == "ablation" for p in pts):
            rep.run(f"ablation {f.name}", lambda: ablation.draw(pts, out, stem, dpi))
        rep.run(f"breakdown {f.name}", lambda: breakdown.draw(pts, out, stem, dpi=dpi))
        rep.run(f"roofline {f.name}", lambda: roofline_draw(pts, out, stem, dpi))
    if loaded:
        md = summary_md or results / "summary.md"
        rep.run("summary", lambda: _write_summary(md, loaded))

    sweeps = sweep_inputs(results, quick)
    if not sweeps:
        rep.skipped.append(f"pareto: no {results}/<dataset>_<model>_<hw>.jsonl (codesign sweep writes it)")
    for f in sweeps:
        from paper_figures import pareto

        rep.run(f"pareto {f.name}", lambda f=f: list(pareto.main([str(f), "--out", str(out)])))

    meas = measured.find_inputs(results)
    if meas:
        def draw_measured():
            pts = measured.load_points(meas)
            return [w for d in sorted({p["dataset"] for p in pts}) for w in measured.draw(pts, out, d, dpi)]
        rep.run("measured", draw_measured)
    else:
        rep.skipped.append(f"measured: no {results}/*_measured.jsonl (codesign sweep --measure writes them)")
    val = validation.find_inputs(results, quick)
    if val:
        rep.run("validation", lambda: validation.draw(val, out, dpi))
    else:
        rep.skipped.append(f"validation: no {results}/hwmodel_validation_*.json or gpu/hwmodel_validation*.json "
                           "(experiments/hwmodel_validation.py writes them)")
    kb = kernels.find_inputs(results, quick)
    if kb:
        rep.run("kernels", lambda: kernels.draw(kb, out, dpi))
    else:
        rep.skipped.append(f"kernels: no {results}/kernel_bench_*.json or gpu/kernel_bench*.json "
                           "(experiments/kernel_bench.py writes them)")
    return rep


def roofline_draw(points, out: Path, stem: str, dpi: int):
    """`paper_figures.roofline.draw` (imported on use: it imports JAX through codesign.hwmodel)."""
    from paper_figures import roofline

    return roofline.draw(points, out, stem, dpi=dpi)


def _write_summary(md: Path, loaded) -> list[Path]:
    """``summary.md`` and, beside it, ``summary.json`` (`paper_figures.summary.write`)."""
    return summary.write(loaded, md, md.with_suffix(".json"))


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: see the module docstring.

    Returns:
        0 if nothing failed, else 1 (``python -m paper_figures`` exits with it).
    """
    parser = argparse.ArgumentParser(prog="python -m paper_figures", description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help=f"default {DEFAULT_RESULTS}")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"default {DEFAULT_OUT} ({DEFAULT_OUT / 'quick'} with --quick)")
    parser.add_argument("--quick", action="store_true", help="smoke run: quick inputs, low resolution")
    parser.add_argument("--dpi", type=int, default=None, help=f"PNG resolution (default {DPI}; {QUICK_DPI} with --quick)")
    parser.add_argument("--summary", type=Path, default=None,
                        help="summary markdown (default <results>/summary.md; <out>/summary.md with --quick)")
    args = parser.parse_args(argv)
    out = args.out or (DEFAULT_OUT / "quick" if args.quick else DEFAULT_OUT)
    dpi = args.dpi or (QUICK_DPI if args.quick else DPI)
    md = args.summary or (out / "summary.md" if args.quick else None)
    rep = run_all(args.results, out, args.quick, dpi, md)
    for n in rep.notes:
        print(f"note: {n}")
    for p in rep.written:
        print(f"wrote {p}")
    for s in rep.skipped:
        print(f"skipped {s}")
    for f in rep.failed:
        print(f"FAILED {f}")
    print(f"{len(rep.written)} file(s) written, {len(rep.skipped)} skipped, {len(rep.failed)} failed")
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
