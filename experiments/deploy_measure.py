"""Realized savings on this CPU: train, harden, `deploy` and `measure` GCNs on a Planetoid graph.

    python experiments/deploy_measure.py                 # Cora, 3 seeds, the methods below
    python experiments/deploy_measure.py --quick         # CI smoke run (1 seed, 5 epochs)

For each method x seed: train (`codesign.train.train`), deploy the hardened model
(`codesign.deploy.deploy`), time it against the dense FP32 program of the same architecture and
weights in this process, alternating (`codesign.deploy.measure`), and cost both with the `cpu`
preset (``modeled_local``: latency and energy of the hardened and the dense model). One record per
run in ``results/<dataset>_deploy_cpu.jsonl`` (resumable, locked).

Methods (TrainConfig overrides): ``dense`` (FP32), ``int8`` (8-bit fake quantization),
``codesign_int8_cw{1,3}`` (feature + channel gates at INT8 with the `cpu` preset's modeled latency
in the loss).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


METHODS = {
    "dense": {},
    "int8": dict(bits=8),
    "codesign_int8_cw1": dict(bits=8, feature_mask=True, channel_mask=True, edge_mask=False, cost_weight=1.0,
                              objective="latency_s"),
    "codesign_int8_cw3": dict(bits=8, feature_mask=True, channel_mask=True, edge_mask=False, cost_weight=3.0,
                              objective="latency_s"),
}


def main(argv=None) -> list[dict]:
    from codesign import hwmodel
    from codesign.data import load_planetoid
    from codesign.deploy import measure_model
    from codesign.experiment import make_record
    from codesign.results import ResultsStore, config_key
    from codesign.train import TrainConfig, train

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="cora", choices=["cora", "citeseer", "pubmed"], help="Planetoid graph")
    p.add_argument("--seeds", type=int, default=3, help="seeds per method")
    p.add_argument("--epochs", type=int, default=200, help="training epochs")
    p.add_argument("--reps", type=int, default=30, help="timed inferences of each program")
    p.add_argument("--out", default="results", help="results folder")
    p.add_argument("--quick", action="store_true", help="CI smoke run: 1 seed, 5 epochs, 3 reps, *_quick file")
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.epochs, args.reps = 1, 5, 3
    graph = load_planetoid(args.dataset)
    hw = hwmodel.presets.get("cpu_numpy")
    locality = hwmodel.measure_locality(graph.senders, graph.receivers, graph.n_nodes)
    name = f"{args.dataset}_deploy_cpu" + ("_quick" if args.quick else "")
    store = ResultsStore(Path(args.out) / f"{name}.jsonl")
    done = store.done_keys()
    out = []
    for method, overrides in METHODS.items():
        for seed in range(args.seeds):
            cfg = TrainConfig.from_flat(**{**overrides, "seed": seed, "epochs": args.epochs})
            config = {"experiment": "deploy_measure", "dataset": args.dataset, "method": method, "hw": hw.name,
                      "seed": seed, "epochs": args.epochs, "overrides": overrides}
            key = config_key(config)
            if key in done:
                continue
            res = train(graph, cfg, hw, return_model=True)
            m = measure_model(res["model"], graph, hw, reps=args.reps, locality=locality)
            record = make_record(key, config, {"test_accuracy": res["test_accuracy"], "densities": res["densities"],
                                               **m})
            store.append(record)
            out.append(record)
            print(f"{method:20s} seed {seed}: acc {100 * res['test_accuracy']:.2f} %  measured speedup "
                  f"{m['speedup']:.2f}x  modeled {m['dense_modeled_local']['latency_s'] / m['modeled_local']['latency_s']:.2f}x  "
                  f"model bytes {m['measured']['model_bytes']} vs {m['dense_measured']['model_bytes']}",
                  file=sys.stderr)
    return out


if __name__ == "__main__":
    main()
