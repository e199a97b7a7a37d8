"""The ceiling on the modeled energy reduction of every method of the tradeoff, per (dataset, model, target).

Every knob that a method of `codesign.experiment.PAPER_METHODS` turns, at its extreme at once:
no edge kept (the self-loops stay: the models add them), no input feature and no hidden channel
(every gate closed), and every quantized tensor (node features and weights) at 1 bit. What no method changes stays:
the FP32 output logits the last layer writes (``out_bits=FP32`` in each model's ``workload``), the
bias / activation / gate stages that read and write them, and the static power over the remaining
latency. The ceiling is the dense FP32 model's modeled energy over that model's (each with its input
features stored dense or CSR, whichever costs less, as every run is reported); a method's point
can approach it, never pass it, under today's cost model. It says what the cost model leaves to
win, not what is reachable within an accuracy: collapsed models (every gate closed) come near it,
and 1-bit signed weights are below `codesign.quant`'s 2-bit minimum.

Writes ``results/reduction_bound.json``: per dataset, model and target the dense and the floor
energy (J), the ceiling (x), and the floor's largest stages (J) with their share.

    python experiments/reduction_bound.py                       # Cora and WordNet; GCN, GAT, GraphSAGE
    python experiments/reduction_bound.py --datasets cora --models gcn
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HWS = ("h100", "gnnear", "hygcn")
MODELS = ("gcn", "gat", "sage")
DATASETS = ("cora", "wordnet")
FLOOR_BITS = 1


FLOOR_DENSITIES = {"edge": 0.0, "feature": 0.0, "channel": 0.0}
"""The kept fractions at the extreme: every edge, feature and channel gate closed."""


def bound(graph, model_name: str, hws, locality) -> dict:
    """``{hw: {"dense_energy_j", "floor_energy_j", "ceiling", "floor_stages"}}`` for ``model_name``
    on ``graph`` (the flagship's model: every gate and quantizer present)."""
    from flax import nnx

    from codesign.experiment import FLAGSHIP
    from codesign.hwmodel import presets
    from codesign.train import TrainConfig, build_model, cheapest_cost, dense_cost, workload_inputs
    cfg = TrainConfig.for_model(model_name, **FLAGSHIP)
    model = build_model(cfg, graph, nnx.Rngs(0))
    inputs = workload_inputs(cfg, graph, locality)  # both feature stores, as every run's report
    out = {}
    for name in hws:
        hw = presets.get(name)
        floor = cheapest_cost(model, graph.n_nodes, graph.n_edges, hw, inputs, objective="energy_j", bits=FLOOR_BITS,
                              densities=FLOOR_DENSITIES)[1]
        dense = dense_cost(cfg, graph, hw, inputs).summary()["energy_j"]
        total = floor.summary()["energy_j"]
        stages = sorted(((k, v["energy_j"]) for k, v in floor.breakdown(hw).items()), key=lambda kv: -kv[1])
        out[name] = {"dense_energy_j": dense, "floor_energy_j": total, "ceiling": dense / total,
                     "floor_static_energy_j": floor.summary().get("static_energy_j", 0.0),
                     "floor_stages": {k: {"energy_j": e, "share": e / total} for k, e in stages[:4]}}
    return out


def main(argv=None) -> dict:
    from codesign.data import load_dataset
    from codesign.hwmodel import measure_locality
    from codesign.results import write_text_atomic

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--hws", default=",".join(HWS))
    p.add_argument("--out", default="results")
    args = p.parse_args(argv)
    result = {"floor": "no edges (self-loops stay), features or hidden channels, every quantized tensor at "
                       f"{FLOOR_BITS} bit; FP32 logits", "bounds": {}}
    for dataset in args.datasets.split(","):
        graph = load_dataset(dataset)
        locality = measure_locality(graph.senders, graph.receivers, graph.n_nodes)
        result["bounds"][dataset] = {m: bound(graph, m, args.hws.split(","), locality) for m in args.models.split(",")}
        for m, per_hw in result["bounds"][dataset].items():
            print(dataset, m, "  ".join(f"{h} {b['ceiling']:.1f}x" for h, b in per_hw.items()), file=sys.stderr)
    path = Path(args.out) / "reduction_bound.json"
    write_text_atomic(path, json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
