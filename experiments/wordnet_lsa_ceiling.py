"""How much faster a dense GraphSAGE gets on `wordnet-lsa` by being narrower, measured, and what it costs in accuracy.

Issue 37 asks for a co-designed point within 1 point of the dense model's validation accuracy that
runs >= 3x faster, measured on this CPU, than the best dense program. Channel and feature gates can at
best find a narrower model; this script measures that ceiling directly with the narrow models
themselves: GraphSAGE (mean aggregator, 2 layers, the host model of `docs/log/wordnet_lsa.md`: lr
0.03, weight decay 0, dropout 0.2, best-validation epoch) trained at hidden width ``h`` on the first
``k`` LSA components (`codesign.data.lsa_features`: columns in decreasing singular value, so the
first ``k`` are what a feature gate keeping ``k`` columns could at best keep), for each ``(h, k)`` of
`GRID`. Each trained model is deployed (`codesign.deploy`) and timed **beside the reference program**
(h = 256, k = 128, the first grid point) in one process, alternating call by call
(`codesign.deploy.measure`), and priced on the ``cpu_numpy`` preset (`codesign.deploy.measure_model`:
``modeled_local``), so every row has its measured speedup over the best dense program, its modeled
latency beside its measured one, and its validation / test accuracy. The script re-runs itself with
glibc's allocator told to keep its memory (`codesign.bench.MALLOC_ENV`, recorded in each record), as
every measured record of this project: otherwise each call faults its fresh [117,659, 256] results
in again, 4 KiB at a time (2026-11-28: the 16-feature program took 187 ms without it, 150 ms with it).

One record per (h, k, seed) in ``results/wordnet_lsa_ceiling_cpu.jsonl`` (appended as each finishes,
under a file lock: `codesign.results.ResultsStore`; a rerun skips what is done).

    python experiments/wordnet_lsa_ceiling.py                # 6 points x 1 seed, 200 epochs: ~20 min on 2 cores
    python experiments/wordnet_lsa_ceiling.py --seeds 3
    python experiments/wordnet_lsa_ceiling.py --quick        # smoke run: 2 points, 2 epochs, 3 reps, *_quick file
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

# the deployed programs' BLAS on one thread, as every measured record of this project (codesign.deploy.measure)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GRID = ((256, 128), (256, 64), (256, 32), (256, 16), (128, 64), (128, 32))
"""(hidden width, LSA components) of each grid point; the first is the reference."""
HOST_MODEL = dict(model="sage", lr=0.03, weight_decay=0.0, dropout=0.2, bits=32, select="best_val")


def main(argv=None) -> list[dict]:
    from codesign import hwmodel
    from codesign.bench import reexec_with_malloc_env
    from codesign.data import load_dataset
    from codesign.deploy import deploy, dense_program, measure, measure_model
    from codesign.results import ResultsStore
    from codesign.train import TrainConfig, train

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=1, help="seeds per grid point")
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--reps", type=int, default=20, help="timed inferences of each program, alternating")
    p.add_argument("--out", default="results")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 grid points, 2 epochs, 3 reps, *_quick file")
    p.add_argument("--reprice", action="store_true", help="train and time nothing: price the stored points again "
                                                          "with today's cpu_numpy fit (*_repriced_cpu.json)")
    args = p.parse_args(argv)
    if __name__ == "__main__":
        reexec_with_malloc_env(__file__, sys.argv[1:] if argv is None else list(argv))
    grid = GRID[:2] if args.quick else GRID
    if args.quick:
        args.epochs, args.reps, args.seeds = 2, 3, 1
    if args.seeds < 1 or args.epochs < 1 or args.reps < 1:
        raise SystemExit("wordnet_lsa_ceiling: --seeds, --epochs and --reps must be >= 1")
    full = load_dataset("wordnet-lsa")
    hw = hwmodel.presets.get("cpu_numpy")
    locality = hwmodel.measure_locality(full.senders, full.receivers, full.n_nodes)
    store = ResultsStore(Path(args.out) / f"wordnet_lsa_ceiling_cpu{'_quick' if args.quick else ''}.jsonl")
    if args.reprice:
        return reprice(store, full, hw, locality, Path(args.out) / f"wordnet_lsa_ceiling_repriced_cpu"
                                                                   f"{'_quick' if args.quick else ''}.json")
    done = store.done_keys()
    out = []
    reference = {}  # seed -> the reference's dense program (h, k = GRID[0]), timed beside every point
    key_of = lambda hidden, k, seed: f"sage/h{hidden}/k{k}/seed{seed}/epochs{args.epochs}"
    for seed in range(args.seeds):
        if all(key_of(h, k, seed) in done for h, k in grid):
            continue
        for hidden, k in grid:
            key = key_of(hidden, k, seed)
            if key in done and seed in reference:
                continue
            graph = dataclasses.replace(full, x=full.x[:, :k])
            cfg = TrainConfig.from_flat(hidden=hidden, epochs=args.epochs, seed=seed, **HOST_MODEL)
            rec = train(graph, cfg, hw, return_model=True)
            model = rec.pop("model")
            if (hidden, k) == grid[0]:
                reference[seed] = dense_program(model, graph)
            if key in done:  # the reference re-trained only to be timed beside the points still to do
                continue
            alone = measure_model(model, graph, hw, reps=args.reps, locality=locality)
            side = measure(deploy(model, graph), reference[seed], reps=args.reps)
            row = {"key": key, "dataset": "wordnet-lsa", "model": "sage", "hidden": hidden, "features": k,
                   "seed": seed, "epochs": args.epochs, "val_accuracy": rec["val_accuracy"],
                   "test_accuracy": rec["test_accuracy"], "train_accuracy": rec["train_accuracy"],
                   "selected_epoch": rec["selected_epoch"], "train_time_s": rec["train_time_s"],
                   "measured_s": side["measured"]["latency_s"],
                   "measured_spread_s": side["measured"]["latency_spread_s"],
                   "reference_measured_s": side["dense_measured"]["latency_s"],
                   "speedup_vs_reference": side["speedup"], "speedup_spread": side["speedup_spread"],
                   "load_average": side["load_average"], "blas_threads": side["blas_threads"],
                   "malloc_env": side["malloc_env"],
                   "modeled_s": alone["modeled_local"]["latency_s"], "measured_alone_s": alone["measured"]["latency_s"],
                   "feature_store": alone["feature_store"], "preset_host": alone["preset_host"]}
            store.append(row)
            out.append(row)
            print(f"h={hidden:3d} k={k:3d} seed {seed}: val {100 * row['val_accuracy']:.2f} test "
                  f"{100 * row['test_accuracy']:.2f} | measured {1e3 * row['measured_s']:.1f} ms, reference "
                  f"{1e3 * row['reference_measured_s']:.1f} ms -> {row['speedup_vs_reference']:.2f}x | modeled "
                  f"{1e3 * row['modeled_s']:.1f} ms ({row['modeled_s'] / row['measured_s']:.2f} of measured)",
                  flush=True)
    return out


def reprice(store, full, hw, locality, path: Path) -> list[dict]:
    """``--reprice``: every stored point priced again on ``hw`` as `codesign.deploy.measure_model`
    prices its program (an untrained model of the point's configuration, `HOST_MODEL` at its widths:
    the points are dense models, so their weights do not change the price; the feature store the
    program got), written to ``path``
    (`codesign.hwmodel.calibrate.repriced`).

    Raises:
      SystemExit: nothing stored yet.
    """
    from flax import nnx

    from codesign import hwmodel
    from codesign.deploy import program_cost
    from codesign.results import write_json_atomic
    from codesign.train import TrainConfig, build_model
    records = store.records()
    if not records:
        raise SystemExit(f"wordnet_lsa_ceiling --reprice: no point stored in {store.path}")
    rows = []
    for r in records:
        graph = dataclasses.replace(full, x=full.x[:, :r["features"]])
        cfg = TrainConfig.from_flat(hidden=r["hidden"], epochs=r["epochs"], seed=r["seed"], **HOST_MODEL)
        model = build_model(cfg, graph, nnx.Rngs(r["seed"]), dense=True)
        cost = program_cost(model, graph, hw, locality=locality, feature_store=r["feature_store"]["compact"])
        rows.append({"key": r["key"], "hidden": r["hidden"], "features": r["features"], "measured_s": r["measured_s"],
                     "modeled_s_recorded": r["modeled_s"], "modeled_s": float(cost.latency_s)})
    rec = hwmodel.calibrate.repriced(rows, hw.name)
    write_json_atomic(path, {"what": "wordnet_lsa_ceiling's stored points priced again on " + hw.name, **rec})
    print(f"wrote {path}: MAPE {100 * rec['summary']['modeled_s_recorded']['mape']:.1f} % as recorded, "
          f"{100 * rec['summary']['modeled_s']['mape']:.1f} % repriced")
    return rows


if __name__ == "__main__":
    main()
