"""``python experiments/large_graph_train.py``: full-batch training on ``csbm-products`` (ogbn-products'
shape, `codesign.data.load_csbm_products`) through the toolkit's own `codesign.train.train`, one
process per run, with what issue 37 asks to report: peak RSS, seconds per epoch and accuracy.

    python experiments/large_graph_train.py --models gcn,sage --nodes 250000 --epochs 200
    python experiments/large_graph_train.py --models gcn,sage --epochs 3     # ogbn-products' 2,449,029 nodes

What is measured, per (model, nodes) run in a fresh subprocess (so one run's heap never inflates
the next one's peak):
  * ``peak_rss_gb``: the process's peak resident set size over its whole life (``wait4``'s
    ``ru_maxrss``: the graph load, the `CsrPattern` build, compilation and every epoch), GB;
    ``load_peak_rss_gb`` the same at the end of loading the graph.
  * ``epoch_s``: wall time of each epoch as `codesign.train.fit` reports it (``on_epoch``); the
    first includes compilation. ``epoch_s_median`` is over the epochs after the first.
  * ``val_accuracy`` / ``test_accuracy``: the trained model (the best-validation epoch,
    ``select="best_val"``), on csbm-products' split (top 8 % of expected degree in train, next 2 %
    validation, the rest test, `codesign.data.csbm_products`); ``backend``: what ``impl="auto"``
    ran.
Models: GCN and GraphSAGE with two layers, hidden 256 (OGB's full-batch baselines on
ogbn-products, Hu et al. 2020, sec. 4.1), dropout 0.5, Adam lr 0.01, the models' default weight
decay. Results are appended to ``--out`` (default ``results/large_graph_train_cpu.json``) as each
run finishes, atomically under a file lock; a run already there (same model, nodes, hidden,
epochs and seed) is skipped.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "experiments"):  # codesign, and the shared child runner beside this script
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench_pyg_child import run_child  # noqa: E402  one way to run a child and read its peak RSS

DEFAULT_OUT = ROOT / "results" / "large_graph_train_cpu.json"
MODELS = ("gcn", "sage")


def run_one(model: str, nodes: int | None, hidden: int, epochs: int, seed: int) -> dict:
    """One training run in this process (call it in a fresh one); the module docstring's fields."""
    import jax
    import numpy as np

    from codesign.data.csbm_products import CsbmProductsParams, load_csbm_products
    from codesign.hwmodel import presets
    from codesign.train import TrainConfig, train

    t0 = time.perf_counter()
    params = CsbmProductsParams() if nodes is None else CsbmProductsParams().scaled(nodes)
    graph = load_csbm_products(params)
    jax.block_until_ready(graph.x)
    load_s = time.perf_counter() - t0
    load_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    cfg = TrainConfig.from_flat(model=model, hidden=hidden, epochs=epochs, dropout=0.5, lr=0.01,
                                select="best_val", seed=seed)
    stamps = [time.perf_counter()]

    def on_epoch(epoch, info):
        stamps.append(time.perf_counter())
        print(f"  {model} epoch {epoch}: {stamps[-1] - stamps[-2]:.2f} s, loss {float(info['loss']):.4f}",
              file=sys.stderr, flush=True)

    r = train(graph, cfg, presets.get("cpu"), on_epoch=on_epoch)
    epoch_s = list(np.diff(stamps))
    return {"model": model, "nodes": params.n_nodes, "directed_edges": int(graph.n_edges), "hidden": hidden,
            "epochs": epochs, "seed": seed, "load_s": load_s, "load_peak_rss_gb": load_peak,
            "epoch_s": epoch_s, "epoch_s_median": float(np.median(epoch_s[1:])) if len(epoch_s) > 1 else None,
            "val_accuracy": float(r["val_accuracy"]), "test_accuracy": float(r["test_accuracy"]),
            "train_accuracy": float(r["train_accuracy"]), "selected_epoch": int(r["selected_epoch"]),
            "backend": r.get("backend"), "train_time_s": float(r["train_time_s"])}


def _key(r: dict) -> tuple:
    return r["model"], r["nodes"], r["hidden"], r["epochs"], r["seed"]


def _append(out: Path, record: dict) -> None:
    """Adds ``record`` to the JSON at ``out`` (read, extend, write atomically, under a file lock)."""
    import filelock

    from codesign.results import write_json_atomic
    with filelock.FileLock(str(out) + ".lock"):
        data = json.loads(out.read_text()) if out.exists() else {"runs": []}
        data["runs"] = [r for r in data["runs"] if _key(r) != _key(record)] + [record]
        write_json_atomic(out, data)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="experiments/large_graph_train.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="gcn,sage", help=f"comma-separated, from {', '.join(MODELS)}")
    p.add_argument("--nodes", type=int, default=None, help="csbm-products at this many nodes (default: 2,449,029)")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = [m for m in models if m not in MODELS]
    if bad or not models or args.epochs < 1 or args.hidden < 1 or (args.nodes is not None and args.nodes < 100):
        print(f"large_graph_train.py: error: models from {MODELS}, epochs >= 1, hidden >= 1, nodes >= 100 "
              f"(got models={models}, epochs={args.epochs}, hidden={args.hidden}, nodes={args.nodes})", file=sys.stderr)
        return 2
    if args.child:
        print(json.dumps(run_one(models[0], args.nodes, args.hidden, args.epochs, args.seed)))
        return 0
    from codesign.data.csbm_products import CsbmProductsParams
    out = Path(args.out)
    done = {_key(r) for r in json.loads(out.read_text())["runs"]} if out.exists() else set()
    nodes = (CsbmProductsParams() if args.nodes is None else CsbmProductsParams().scaled(args.nodes)).n_nodes
    for model in models:
        if (model, nodes, args.hidden, args.epochs, args.seed) in done:
            print(f"{model} at {nodes} nodes: already in {out}")
            continue
        cmd = [sys.executable, __file__, "--child", "--models", model, "--hidden", str(args.hidden),
               "--epochs", str(args.epochs), "--seed", str(args.seed)]
        if args.nodes is not None:
            cmd += ["--nodes", str(args.nodes)]
        rc, text, _, peak_mib = run_child(cmd, capture_stderr=False)  # its per-epoch lines show as they come
        peak = peak_mib * (1 << 20) / 1e9
        if rc != 0:
            print(f"{model} at {nodes} nodes: failed ({rc}) at peak RSS {peak:.2f} GB", file=sys.stderr)
            record = {"model": model, "nodes": nodes, "hidden": args.hidden, "epochs": args.epochs, "seed": args.seed,
                      "failed": rc, "peak_rss_gb": peak}
        else:
            record = {**json.loads(text.strip().splitlines()[-1]), "peak_rss_gb": peak}
            print(f"{model} at {nodes} nodes: peak RSS {peak:.2f} GB, {record['epoch_s_median']} s/epoch, "
                  f"val {record['val_accuracy']:.4f}, test {record['test_accuracy']:.4f}")
        record.update(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                      loadavg=list(os.getloadavg()), cpus=len(os.sched_getaffinity(0)))
        _append(out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
