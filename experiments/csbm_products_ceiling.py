"""How much faster a deployed GCN / GraphSAGE gets on `csbm-products` by being narrower or sparser,
measured beside the reference program, and whether the ``cpu_numpy`` preset predicts it.

Issue 37 asks, on both of its graphs, for a co-designed point within 1 point of the dense model's
accuracy that runs >= 3x faster measured than the best dense program, and for the modeled latency
of the deployed points within 20 % of the measured one. Training one csbm-products model takes
about 30 s an epoch on this 2-core machine (`experiments/large_graph_train.py`), so this script
separates the two questions: a deployed program's latency depends only on its shapes (kept input
features, hidden width, kept edges; the weights' values do not change a dense product's time), so
it deploys **untrained** models of each shape and answers the latency side alone. **No accuracy is
measured here**; which of these shapes a co-designed model reaches within 1 point is the training
runs' question.

For each `GRID` point ``(model, hidden, features, edge keep)``: the first ``features`` input columns
and a random ``keep`` fraction of the undirected edges (one uniform draw per unordered pair, both
directions kept or dropped together: the kept subgraph a pruned model's program aggregates over),
a 2-layer model (`codesign.train.build_model`, hidden width ``hidden``, FP32, the
seed's initial weights) deployed (`codesign.deploy.dense_program`: the dense program of those shapes,
as a pruned model's compact program is) and timed **beside the reference program** of its
architecture (hidden 256, every feature and edge: OGB's full-batch baselines on ogbn-products) in
one process, alternating call by call (`codesign.deploy.measure`); its modeled latency on the
``cpu_numpy`` preset (`hwmodel.estimate` of the model's workload on the kept graph's locality, as
`codesign.deploy.measure_model` prices a deployed program). The process re-runs itself with glibc's
allocator told to keep its memory (`codesign.bench.MALLOC_ENV`) and one BLAS thread, as every
measured record of this project.

One record per point in ``results/csbm_products_ceiling_cpu.jsonl`` (appended as each finishes,
under a file lock: `codesign.results.ResultsStore`; a rerun skips what is done).

    python experiments/csbm_products_ceiling.py                 # full size: ~30 s an inference, ~7 min a point, 15 GB
    python experiments/csbm_products_ceiling.py --nodes 250000  # the same generator at 250k nodes
    python experiments/csbm_products_ceiling.py --quick         # smoke run: 3,000 nodes, 2 points, 2 reps
    python experiments/csbm_products_ceiling.py --reprice       # the stored points priced by today's cpu_numpy
    python experiments/csbm_products_ceiling.py --nodes 250000 --epochs 200 --shapes 128/50/0.5,64/25/0.3

``--epochs N`` answers the accuracy side too: each shape is **trained** (N epochs full-batch, dropout
0.5, Adam lr 0.01, the best-validation epoch: `experiments/large_graph_train.py`'s recipe, OGB's
full-batch baselines) on its kept features and edges before it is deployed and timed beside the
trained reference, and its validation / test accuracy is recorded (key suffix ``/epochs{N}``).
``--shapes`` keeps only some of `GRID`'s shapes (the reference is always run).

``--reprice`` times nothing: it prices every stored point of the run (``--nodes``, ``--seed``) again
with the committed ``cpu_numpy`` fit (`codesign.deploy.program_cost` on the kept graph's locality)
and writes ``results/csbm_products_ceiling_repriced_cpu.json`` (per point the measured time, the
modeled time as recorded and as repriced; MAPE and median modeled / measured of both, and the fit's
date), so that a change of the cost model is checked on this graph without the hours of timing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# the deployed programs' BLAS on one thread, as every measured record of this project (codesign.deploy.measure)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GRID = (("gcn", 256, 100, 1.0), ("gcn", 128, 100, 1.0), ("gcn", 256, 50, 1.0), ("gcn", 256, 100, 0.5),
        ("gcn", 256, 100, 0.3), ("gcn", 128, 50, 0.5), ("gcn", 64, 25, 0.3),
        ("sage", 256, 100, 1.0), ("sage", 256, 50, 1.0), ("sage", 128, 50, 0.5), ("sage", 64, 25, 0.3),
        ("sage", 256, 100, 0.5), ("sage", 128, 100, 1.0), ("sage", 256, 100, 0.3))
"""(model, hidden width, kept input features of 100, kept fraction of the undirected edges); per
model the first is the reference (`REFERENCE_SHAPE`); GraphSAGE's in the order its points say most
(GCN's hidden width alone changed nothing: 0.96x), so a run stopped early has those."""
REFERENCE_SHAPE = (256, 100, 1.0)


def _kept_pairs(graph, keep: float, seed: int):
    """bool [E]: a random ``keep`` fraction (< 1) of the undirected edges, both directions of a
    pair together (a pair is identified by its unordered endpoints)."""
    import numpy as np
    s, r = np.asarray(graph.senders, np.int64), np.asarray(graph.receivers, np.int64)
    pair = np.minimum(s, r) * graph.n_nodes + np.maximum(s, r)
    uniq, inverse = np.unique(pair, return_inverse=True)
    return (np.random.default_rng(seed).random(uniq.size) < keep)[inverse]


def main(argv=None) -> list[dict]:
    import dataclasses

    from flax import nnx

    from codesign import hwmodel
    from codesign.bench import reexec_with_malloc_env
    from codesign.data.csbm_products import CsbmProductsParams, load_csbm_products
    from codesign.deploy import dense_program, measure, program_cost
    from codesign.results import ResultsStore
    from codesign.train import TrainConfig, build_model, train

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=None, help="csbm-products at this many nodes (default: full size)")
    p.add_argument("--reps", type=int, default=3, help="timed inferences of each program, alternating")
    p.add_argument("--seed", type=int, default=0, help="weights and kept edges")
    p.add_argument("--models", default="gcn,sage")
    p.add_argument("--out", default="results")
    p.add_argument("--quick", action="store_true", help="smoke run: 3,000 nodes, 2 points of GCN, 2 reps, *_quick file")
    p.add_argument("--epochs", type=int, default=None,
                   help="train each shape this many epochs (dropout 0.5, Adam lr 0.01, best-validation epoch: "
                        "large_graph_train's recipe) and record its accuracy; default: untrained, latency only")
    p.add_argument("--shapes", default=None, metavar="H/K/KEEP,...",
                   help="only these (hidden / features / kept edge pairs) of GRID, e.g. 256/100/1,128/50/0.5 "
                        "(the reference's shape is always run)")
    p.add_argument("--reprice", action="store_true",
                   help="time nothing: price the stored points again with today's cpu_numpy fit (*_repriced_cpu.json)")
    args = p.parse_args(argv)
    if __name__ == "__main__":
        reexec_with_malloc_env(__file__, sys.argv[1:] if argv is None else list(argv))
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not models or any(m not in ("gcn", "sage") for m in models):
        raise SystemExit(f"csbm_products_ceiling: --models must name gcn and / or sage, got {args.models!r}")
    if args.quick:
        args.nodes, args.reps, models = 3000, 2, ["gcn"]
    if args.reps < 1 or (args.nodes is not None and args.nodes < 100) or (args.epochs is not None and args.epochs < 1):
        raise SystemExit("csbm_products_ceiling: --reps and --epochs must be >= 1 and --nodes >= 100")
    grid = [g for g in GRID if g[0] in models]
    if args.shapes:
        try:
            wanted = {(int(h), int(k), float(e)) for h, k, e in (x.split("/") for x in args.shapes.split(","))}
        except ValueError:
            raise SystemExit(f"csbm_products_ceiling: --shapes must be H/K/KEEP,..., got {args.shapes!r}") from None
        unknown = wanted - {g[1:] for g in GRID}
        if unknown:
            raise SystemExit(f"csbm_products_ceiling: --shapes not in GRID: {sorted(unknown)}")
        grid = [g for g in grid if g[1:] in wanted | {REFERENCE_SHAPE}]
    if args.quick:
        grid = [g for g in grid if g[1:] in (REFERENCE_SHAPE, (128, 50, 0.5))]
    params = CsbmProductsParams() if args.nodes is None else CsbmProductsParams().scaled(args.nodes)
    full = load_csbm_products(params)
    hw = hwmodel.presets.get("cpu_numpy")
    store = ResultsStore(Path(args.out) / f"csbm_products_ceiling_cpu{'_quick' if args.quick else ''}.jsonl")
    if args.reprice:
        return reprice(store, full, hw, args.seed, Path(args.out) / f"csbm_products_ceiling_repriced_cpu"
                                                                   f"{'_quick' if args.quick else ''}.json")
    done = store.done_keys()
    key_of = lambda m, h, k, keep: (f"{m}/n{params.n_nodes}/h{h}/k{k}/keep{keep:g}/seed{args.seed}"
                                    + (f"/epochs{args.epochs}" if args.epochs else ""))
    out, localities = [], {}  # keep fraction -> locality profile of its kept edges (seeded: the same for each model)
    for model_name in models:
        points = [g for g in grid if g[0] == model_name]
        if all(key_of(*g) in done for g in points):
            continue

        def program(hidden, k, keep):
            """(model, its graph, its dense program, its training record or None)."""
            graph = full if keep >= 1.0 else full.keep_edges(_kept_pairs(full, keep, args.seed))
            graph = dataclasses.replace(graph, x=graph.x[:, :k])
            if args.epochs:
                cfg = TrainConfig.from_flat(model=model_name, hidden=hidden, bits=32, seed=args.seed,
                                            epochs=args.epochs, dropout=0.5, lr=0.01, select="best_val")
                rec = train(graph, cfg, hwmodel.presets.get("cpu"), return_model=True)
                model = rec.pop("model")
            else:
                cfg = TrainConfig.from_flat(model=model_name, hidden=hidden, bits=32, seed=args.seed)
                model, rec = build_model(cfg, graph, nnx.Rngs(args.seed), dense=True), None
                model.eval()
            return model, graph, dense_program(model, graph, "dense"), rec

        ref_model, ref_graph, reference, ref_rec = program(*REFERENCE_SHAPE)
        for g in points:
            key = key_of(*g)
            if key in done:
                continue
            _, hidden, k, keep = g
            model, graph, prog, rec = ((ref_model, ref_graph, reference, ref_rec) if g[1:] == REFERENCE_SHAPE
                                       else program(hidden, k, keep))
            if keep not in localities:  # the same kept edges for every shape at this fraction: one sort of them
                localities[keep] = hwmodel.measure_locality(graph.senders, graph.receivers, graph.n_nodes)
            locality = localities[keep]
            modeled = program_cost(model, graph, hw, locality=locality)
            side = measure(prog, reference, reps=args.reps, warmup=1)
            row = {"key": key, "dataset": "csbm-products", "nodes": int(graph.n_nodes), "model": model_name,
                   "hidden": hidden, "features": k, "edge_keep": keep, "kept_edges": int(graph.n_edges),
                   "seed": args.seed, "trained": rec is not None,
                   **({} if rec is None else {
                       "epochs": args.epochs, "val_accuracy": rec["val_accuracy"],
                       "test_accuracy": rec["test_accuracy"], "train_accuracy": rec["train_accuracy"],
                       "selected_epoch": rec["selected_epoch"], "train_time_s": rec["train_time_s"]}),
                   "measured_s": side["measured"]["latency_s"],
                   "measured_spread_s": side["measured"]["latency_spread_s"],
                   "reference_measured_s": side["dense_measured"]["latency_s"],
                   "speedup_vs_reference": side["speedup"], "speedup_spread": side["speedup_spread"],
                   "peak_bytes": side["measured"]["peak_bytes"],
                   "modeled_s": float(modeled.latency_s), "load_average": side["load_average"],
                   "blas_threads": side["blas_threads"], "malloc_env": side["malloc_env"],
                   "preset_host": hwmodel.calibrate.fit_host(hw.name)}
            store.append(row)
            out.append(row)
            acc = "" if rec is None else (f"val {100 * row['val_accuracy']:.2f} test "
                                          f"{100 * row['test_accuracy']:.2f} | ")
            print(f"{model_name} h={hidden:3d} k={k:3d} keep={keep:.1f}: {acc}measured {row['measured_s']:.2f} s, "
                  f"reference {row['reference_measured_s']:.2f} s -> {row['speedup_vs_reference']:.2f}x | modeled "
                  f"{row['modeled_s']:.2f} s ({row['modeled_s'] / row['measured_s']:.2f} of measured)", flush=True)
            del prog
    return out


def reprice(store, full, hw, seed: int, path: Path) -> list[dict]:
    """``--reprice``: every stored point of ``full``'s node count and ``seed`` priced again on ``hw``
    (the untrained model of its shape on its kept graph, `codesign.deploy.program_cost`), written to
    ``path`` with the MAPE and median modeled / measured as recorded and as repriced.

    Raises:
      SystemExit: no stored point of this node count and seed.
    """
    import dataclasses

    from flax import nnx

    from codesign import hwmodel
    from codesign.deploy import program_cost
    from codesign.results import write_json_atomic
    from codesign.train import TrainConfig, build_model
    records = [r for r in store.records() if r["nodes"] == full.n_nodes and r["seed"] == seed]
    if not records:
        raise SystemExit(f"csbm_products_ceiling --reprice: no point of {full.n_nodes} nodes and seed {seed} "
                         f"in {store.path}")
    rows = []
    for keep in sorted({r["edge_keep"] for r in records}, reverse=True):
        graph = full if keep >= 1.0 else full.keep_edges(_kept_pairs(full, keep, seed))
        locality = hwmodel.measure_locality(graph.senders, graph.receivers, graph.n_nodes)
        for r in (r for r in records if r["edge_keep"] == keep):
            g = dataclasses.replace(graph, x=graph.x[:, :r["features"]])
            cfg = TrainConfig.from_flat(model=r["model"], hidden=r["hidden"], bits=32, seed=seed)
            model = build_model(cfg, g, nnx.Rngs(seed), dense=True)
            cost = program_cost(model, g, hw, locality=locality)
            rows.append({"key": r["key"], "model": r["model"], "hidden": r["hidden"], "features": r["features"],
                         "edge_keep": keep, "measured_s": r["measured_s"], "modeled_s_recorded": r["modeled_s"],
                         "modeled_s": float(cost.latency_s)})
            print(f"{r['key']}: measured {r['measured_s']:.2f} s, modeled {r['modeled_s']:.2f} as recorded, "
                  f"{rows[-1]['modeled_s']:.2f} now", flush=True)
        del graph
    rec = hwmodel.calibrate.repriced(rows, hw.name)
    summary = rec["summary"]
    write_json_atomic(path, {"what": "csbm_products_ceiling's stored points priced again on " + hw.name,
                             "nodes": int(full.n_nodes), "seed": seed, **rec})
    print(f"wrote {path}: MAPE {100 * summary['modeled_s_recorded']['mape']:.1f} % as recorded, "
          f"{100 * summary['modeled_s']['mape']:.1f} % repriced (median modeled / measured "
          f"{summary['modeled_s_recorded']['median_ratio']:.2f} -> {summary['modeled_s']['median_ratio']:.2f})")
    return rows


if __name__ == "__main__":
    main()
