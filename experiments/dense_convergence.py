"""Is the dense FP32 reference trained to convergence? (issue 34: "dense references trained to
convergence; show the validation curve flat").

For each dense search candidate of ``experiments/tradeoff.py`` (`CANDIDATES["dense"]`: step size x
weight decay, epoch chosen on validation) of ``--model`` on ``--dataset``, trains ``--seeds`` seeds
at each of ``--epochs`` budgets (`codesign.train.train_seeds`, the grid's trainer) and records the
validation and test accuracy (mean, sample std over seeds) and the selected epoch. The curve is flat
at a budget where the longest budget's validation mean gains no more than the seeds' spread
(the larger sample std of the two) over it.

    python experiments/dense_convergence.py            # -> results/dense_convergence_cora_gcn.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tradeoff import CANDIDATES  # noqa: E402

from codesign.data import load_dataset  # noqa: E402
from codesign.hwmodel import presets  # noqa: E402
from codesign.results import write_json_atomic  # noqa: E402
from codesign.train import TrainConfig, train_seeds  # noqa: E402

RESULTS = Path(__file__).resolve().parent.parent / "results"


def _stats(xs: list[float]) -> dict:
    return {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0, "n": len(xs)}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="cora")
    p.add_argument("--model", default="gcn")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--epochs", default="100,200,400,800", help="comma-separated epoch budgets")
    p.add_argument("--candidates", default=None, help="comma-separated indices into CANDIDATES['dense'] "
                   "(default: every one without its own epochs)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    budgets = [int(e) for e in args.epochs.split(",")]
    if args.seeds < 2 or not budgets or min(budgets) < 1:
        raise SystemExit("--seeds must be >= 2 and every --epochs budget >= 1")
    graph = load_dataset(args.dataset)
    hw = presets.get("h100")  # the cost does not enter a dense run's training; accuracy only
    rows = []
    picked = ([int(c) for c in args.candidates.split(",")] if args.candidates else
              [c for c, over in enumerate(CANDIDATES["dense"]) if "epochs" not in over])
    for c in picked:
        over = {k: v for k, v in CANDIDATES["dense"][c].items() if k != "epochs"}
        for epochs in budgets:
            cfgs = [TrainConfig.for_model(args.model, seed=s, **{**over, "epochs": epochs}) for s in range(args.seeds)]
            runs = list(train_seeds(graph, cfgs, hw))
            rows.append({"candidate": c, "overrides": over, "epochs": epochs,
                         "val_pct": _stats([100 * r["val_accuracy"] for r in runs]),
                         "test_pct": _stats([100 * r["test_accuracy"] for r in runs]),
                         "selected_epoch": [r["selected_epoch"] for r in runs]})
            print(f"candidate {c} {over} epochs {epochs}: val {rows[-1]['val_pct']['mean']:.2f} "
                  f"± {rows[-1]['val_pct']['std']:.2f}", file=sys.stderr)
    default = TrainConfig.for_model(args.model).optim.epochs
    flat = {}  # per candidate and budget: the validation gain of the longest budget over it, and the spread
    for c in picked:
        mine = {r["epochs"]: r for r in rows if r["candidate"] == c}
        longest = mine[max(budgets)]
        for e, r in mine.items():
            if e == max(budgets):
                continue
            spread = max(longest["val_pct"]["std"], r["val_pct"]["std"])
            gain = longest["val_pct"]["mean"] - r["val_pct"]["mean"]
            flat.setdefault(c, {})[e] = {"gain_pts": gain, "spread_pts": spread, "flat": gain <= spread}
    out = {"what": f"dense FP32 {args.model} on {args.dataset}: validation / test accuracy (%) per epoch budget, "
                   f"{args.seeds} seeds, each dense search candidate of experiments/tradeoff.py, epoch chosen on "
                   "validation",
           "grid_epochs": default, "budgets": budgets, "rows": rows,
           "flat_vs_longest": flat, "load_1min_end": os.getloadavg()[0]}
    path = args.out or RESULTS / f"dense_convergence_{args.dataset}_{args.model}.json"
    write_json_atomic(path, out)
    print(path)
    return out


if __name__ == "__main__":
    main()
