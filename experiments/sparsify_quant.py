"""Issue-5 numbers: every sparsifier and quantizer of codesign on one dataset and model, x seeds.

    python experiments/sparsify_quant.py                      # Cora GCN, 5 seeds, all methods
    python experiments/sparsify_quant.py --methods fp32,int4_qat --seeds 2
    python experiments/sparsify_quant.py --quick              # CI smoke run (2 methods, 1 seed, 5 epochs)

Writes one record per (method, seed) to ``results/<dataset>_<model>_sparsify_quant.jsonl``
(resumable: finished runs are skipped; records are appended atomically with the config and the
code version) and prints a summary table (mean +- std over seeds of test accuracy, kept edges /
tiles / features, hardened bits as the per-tensor mean and as bits per stored value (`mean_bits`),
modeled energy vs the dense FP32 model on ``--hw``, the per-tensor bits x0 w0 x1 w1).

"Average bits" (records: ``mean_bits``): the *per-tensor* mean is the plain mean of the four
quantized tensors' hardened widths (layer-0 input x0 [N, F], weight w0 [F, H], layer-1 input x1
[N, H], weight w1 [H, C]; a per-node width enters as its mean over nodes); the *element-weighted*
mean is bits per stored value, the memory-weighted average of Uhlich et al. (ICLR 2020) and A^2Q
(Zhu et al., ICLR 2023). On Cora x0 holds 98 % of the values, so the element-weighted mean is
about x0's width; the per-tensor mean is the stricter one and the issue-5 target (<= 4 bits) is
judged on it.

Hyper-parameters of the pinned learned-bit methods (``bits_weight`` in {0.05, 0.1, 0.2, 0.5};
initial width 6 or 8; ``quant_lr`` 0.02 or 0.04) were chosen on seeds 0-1 by validation
accuracy among the settings whose per-tensor mean was <= 4: ``bits_weight`` 0.1, 8 bits, 0.02
(validation 80.3 %; the others 76.4-78.5 %). Epochs are selected on validation
(``select="best_val"``: the lowest validation cross-entropy + cost term).

Methods are `TrainConfig` overrides (``METHODS``), plus the random references every learned
edge mask should beat, the FP32 model trained and tested on a random subgraph:
``random_edges_<p>`` keeps a random ``p`` of the edges (`codesign.sparsify.random_edge_removal`),
``random_tiles_<p>`` a random ``p`` of the 16 x 16 tiles after RCM reordering, those a
`BlockEdgeMask` gates (`BlockEdgeMask.random_tile_edge_mask`). A ``_distill`` suffix adds the
self-distillation of the learned masks' methods (``_distill_w3``: weight 3): the student on the random subgraph is distilled
from the dense GCN trained on the full graph (``train(teacher_logits=)``), so that a learned mask
is compared with random removal under the same loss.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

from codesign.experiment import DISTILL

RANDOM = re.compile(r"random_(edges|tiles)_([0-9.]+)(_distill\w*)?")
"""``random_<edges|tiles>_<kept fraction>[_distill...]``: a random-subgraph reference method (its
`METHODS` entry holds the distillation settings)."""

METHODS = {
    "fp32": {},
    "int8_qat": dict(bits=8),
    "int4_qat": dict(bits=4),
    "int4_lsq": dict(bits=4, quantizer="lsq"),
    "int4_degree_quant": dict(bits=4, quantizer="degree"),
    "learned_bits": dict(bits=8, quantizer="learned", cost_weight=0.3, edge_mask=False, feature_mask=False),
    "a2q_bits": dict(bits=8, quantizer="a2q", cost_weight=0.3, edge_mask=False, feature_mask=False),
    # pinned ranges (TrainConfig.pin_ranges: weights and hidden features quantized at their data max,
    # only the widths learned) with and without a bit-width penalty independent of the hardware
    # model (TrainConfig.bits_weight); epochs by the validation objective; bits_weight 0.1 chosen
    # on validation accuracy (module docstring).
    "learned_bits_pinned": dict(bits=8, quantizer="learned", cost_weight=0.3, edge_mask=False, feature_mask=False,
                                pin_ranges=True, select="best_val"),
    "learned_bits_pinned_bw0.1": dict(bits=8, quantizer="learned", cost_weight=0.3, edge_mask=False,
                                      feature_mask=False, pin_ranges=True, bits_weight=0.1, select="best_val"),
    "a2q_bits_pinned_bw0.1": dict(bits=8, quantizer="a2q", cost_weight=0.3, edge_mask=False, feature_mask=False,
                                  pin_ranges=True, bits_weight=0.1, select="best_val"),
    # learned widths started (and capped) at 4 bits: the cost term then decides which tensors go lower
    "learned_bits_max4": dict(bits=4, quantizer="learned", cost_weight=0.3, edge_mask=False, feature_mask=False),
    # an L0 pressure on the kept edges (TrainConfig.edge_l0_weight), without and with
    # self-distillation from the dense GCN over all nodes (TrainConfig.distill_weight)
    "edge_mask_l0": dict(cost_weight=0.3, edge_mask=True, feature_mask=False, edge_l0_weight=1.0),
    "edge_mask_distill": dict(cost_weight=0.3, edge_mask=True, feature_mask=False, edge_l0_weight=1.0,
                              distill_weight=1.0, distill_temperature=2.0),
    "block_mask_distill": dict(cost_weight=0.3, edge_mask=True, feature_mask=False, edge_sparsifier="block",
                               edge_l0_weight=1.0, distill_weight=1.0, distill_temperature=2.0),
    "edge_mask_distill_l0.7": dict(cost_weight=0.3, edge_mask=True, feature_mask=False, edge_l0_weight=0.7,
                                   distill_weight=1.0, distill_temperature=2.0),
    "edge_mask_distill_l0.8": dict(cost_weight=0.3, edge_mask=True, feature_mask=False, edge_l0_weight=0.8,
                                   distill_weight=1.0, distill_temperature=2.0),
    "block_mask_distill_l0.7": dict(cost_weight=0.3, edge_mask=True, feature_mask=False, edge_sparsifier="block",
                                    edge_l0_weight=0.7, distill_weight=1.0, distill_temperature=2.0),
    # BlockEdgeMask variants around block_mask_distill_l0.7: a stronger distillation weight, per-tensor
    # gate Adam. Chosen by mean validation accuracy among those keeping <= 50 % of the tiles: w3_l2.1
    # (val 78.84; l0.7 78.60, w5_l3.5 78.56); for edges, edge_mask_distill_l0.8 (val 79.16; w3_l2.4 78.88).
    # Random removal under the same loss comes close (random_*_distill_w3 below): most of the gain over
    # the plain masks is the distillation, not the choice of edges.
    "block_mask_distill_w3_l0.7": dict(cost_weight=0.3, edge_mask=True, feature_mask=False, edge_sparsifier="block",
                                       edge_l0_weight=0.7, distill_weight=3.0, distill_temperature=2.0),
    "block_mask_distill_w3_l2.1": dict(cost_weight=0.3, edge_mask=True, feature_mask=False, edge_sparsifier="block",
                                       edge_l0_weight=2.1, distill_weight=3.0, distill_temperature=2.0),
    "block_mask_distill_w5_l3.5": dict(cost_weight=0.3, edge_mask=True, feature_mask=False, edge_sparsifier="block",
                                       edge_l0_weight=3.5, distill_weight=5.0, distill_temperature=2.0),
    "edge_mask_distill_w3_l2.4": dict(cost_weight=0.3, edge_mask=True, feature_mask=False, edge_l0_weight=2.4,
                                      distill_weight=3.0, distill_temperature=2.0),
    "block_mask_distill_l0.7_tadam": dict(cost_weight=0.3, edge_mask=True, feature_mask=False, edge_sparsifier="block",
                                          edge_l0_weight=0.7, distill_weight=1.0, distill_temperature=2.0,
                                          gate_optimizer="tensor_adam"),
    "edge_mask_cw0.3": dict(cost_weight=0.3, edge_mask=True, feature_mask=False),
    "edge_mask_cw1": dict(cost_weight=1.0, edge_mask=True, feature_mask=False),
    "block_mask_cw0.3": dict(cost_weight=0.3, edge_mask=True, feature_mask=False, edge_sparsifier="block"),
    "block_mask_cw1": dict(cost_weight=1.0, edge_mask=True, feature_mask=False, edge_sparsifier="block"),
    "edge_scorer_cw0.1": dict(cost_weight=0.1, edge_mask=True, feature_mask=False, edge_sparsifier="scorer"),
    "dropedge_0.5": dict(edge_mask=True, feature_mask=False, edge_sparsifier="dropedge", dropedge_rate=0.5),
    "random_edges_0.5": {},
    # random references at the kept fractions the distilled masks reach (edge_mask_distill_l0.8: 0.48
    # of the edges; block_mask_distill_l0.7: 0.45 of the tiles), without and with the same distillation
    "random_edges_0.48": {},
    "random_edges_0.5_distill": DISTILL,
    "random_edges_0.48_distill": DISTILL,
    "random_tiles_0.45": {},
    "random_tiles_0.45_distill": DISTILL,
    "random_edges_0.48_distill_w3": dict(DISTILL, distill_weight=3.0),
    "random_edges_0.44_distill_w3": dict(DISTILL, distill_weight=3.0),  # edge_mask_distill_w3_l2.4 keeps 0.44
    "random_tiles_0.47": {},  # block_mask_distill_w3_l2.1 keeps 0.47 of the tiles
    "random_tiles_0.47_distill": DISTILL,
    "random_tiles_0.47_distill_w3": dict(DISTILL, distill_weight=3.0),  # the loss of block_mask_distill_w3_l2.1
    "feature_channel_cw1": dict(cost_weight=1.0, edge_mask=False, feature_mask=True, channel_mask=True),
}
"""The sparsifier / quantizer ablations of this script by name, as `TrainConfig` overrides (the
``random_*`` names are random-subgraph references this script builds, `RANDOM`). Experiment grids,
not library methods: the names encode the hyper-parameters they were run at."""

QUICK_METHODS = ("fp32", "block_mask_cw1")


def _keep_random_edges(graph, keep: float, seed: int):
    import jax

    from codesign.sparsify import random_edge_removal
    return graph.keep_edges(random_edge_removal(jax.random.key(seed), graph.n_edges, keep))


def _keep_random_tiles(graph, keep_tiles: float, seed: int, block_size: int, reorder):
    """(graph with the edges of a random ``keep_tiles`` of its tiles, tile stats as `train` reports them)."""
    import jax
    from flax import nnx

    from codesign.sparsify import BlockEdgeMask, prune_count
    mask = BlockEdgeMask.from_graph(graph.senders, graph.receivers, graph.n_nodes, block_size, reorder,
                                    rngs=nnx.Rngs(0))
    keep = mask.random_tile_edge_mask(jax.random.key(seed), keep_tiles)
    kept = prune_count(mask.n_tiles, keep_tiles)
    return graph.keep_edges(keep), {"kept": kept, "total": mask.n_tiles, "kept_fraction": kept / mask.n_tiles,
                                    "gated": mask.n_gated_tiles, "block_size": block_size}


def run_one(graph, method: str, seed: int, hw, epochs):
    from codesign.quant import average_bits
    from codesign.train import TrainConfig, dense_teacher, train
    over = dict(METHODS[method])
    if epochs is not None:
        over["epochs"] = epochs
    cfg = TrainConfig.from_flat(seed=seed, **over)
    g, tiles, teacher = graph, None, None
    random = RANDOM.fullmatch(method)
    if random:
        kind, keep = random.group(1), float(random.group(2))
        if kind == "edges":
            g = _keep_random_edges(graph, keep, seed)
        else:
            g, tiles = _keep_random_tiles(graph, keep, seed, cfg.masks.block_size, cfg.masks.reorder)
        if cfg.distill.weight > 0:  # the dense teacher of the full graph, as the learned masks have
            teacher = dense_teacher(graph, cfg, hw)[0]
    r = train(g, cfg, hw, teacher_logits=teacher)
    if g is not graph:  # cost and densities relative to the full graph
        r["densities"]["edge"] = g.n_edges / graph.n_edges
        r["tiles"] = tiles or r["tiles"]
    n, f, h, c = graph.n_nodes, graph.x.shape[1], cfg.model.hidden, int(graph.y.max()) + 1
    r["bits_elements"] = {"x0": n * f, "w0": f * h, "x1": n * h, "w1": h * c}  # values per quantized tensor
    per_tensor, per_value = average_bits(r["layer_bits"], r["bits_elements"])
    r["mean_bits"] = {"per_tensor": per_tensor, "element_weighted": per_value}
    return cfg, r


def mean_bits(rec: dict) -> tuple[float, float]:
    """(per-tensor mean, element-weighted mean) of a record's hardened bit-widths
    (`codesign.quant.average_bits`): the plain mean over the quantized tensors (x0, w0, x1, w1),
    and bits per stored value (weighted by each tensor's element count, the average that Uhlich
    et al., ICLR 2020, and A2Q, ICLR 2023, report). Records without learned widths give their
    uniform width twice; records without element counts give NaN for the second."""
    from codesign.quant import average_bits
    lb = rec.get("layer_bits") or {}
    if not lb:
        return float(rec["bits"]), float(rec["bits"])
    counts = rec.get("bits_elements")
    if not counts:  # older records: a uniform width is its own element-weighted mean
        uniform = len(set(lb.values())) == 1
        return float(np.mean(list(lb.values()))), float(next(iter(lb.values()))) if uniform else float("nan")
    return average_bits(lb, counts)


def summarize(records: list[dict]) -> list[dict]:
    """Per method: mean / std of test accuracy over seeds, mean kept fractions, bits, energy ratio."""
    rows = []
    for method in dict.fromkeys(r["method"] for r in records):
        rs = [r for r in records if r["method"] == method]
        acc = np.array([r["test_accuracy"] for r in rs])
        energy = np.mean([r["modeled"]["energy_j"] / r["dense_modeled"]["energy_j"] for r in rs])
        bits = np.array([mean_bits(r) for r in rs])
        rows.append(dict(method=method, seeds=len(rs), test_accuracy=float(acc.mean()),
                         test_accuracy_std=float(acc.std()),
                         edge=float(np.mean([r["densities"]["edge"] for r in rs])),
                         feature=float(np.mean([r["densities"]["feature"] for r in rs])),
                         kept_tiles=float(np.mean([r["tiles"]["kept_fraction"] if r.get("tiles") else np.nan
                                                   for r in rs])),
                         mean_bits=float(np.mean(bits[:, 0])), mean_bits_elements=float(np.mean(bits[:, 1])),
                         layer_bits={k: float(np.mean([r["layer_bits"][k] for r in rs]))
                                     for k in (rs[0].get("layer_bits") or {})},
                         energy_ratio=float(energy)))
    return rows


def main(argv=None) -> list[dict]:
    from tqdm import tqdm

    from codesign.data import load_planetoid
    from codesign.hwmodel import presets
    from codesign.experiment import make_record
    from codesign.results import ResultsStore, config_key
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="cora")
    p.add_argument("--hw", default="h100")
    p.add_argument("--methods", default=None, help="comma-separated subset of " + ",".join(METHODS))
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--epochs", type=int, default=None, help="override every method's epochs")
    p.add_argument("--out", default="results")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 methods, 1 seed, 5 epochs")
    args = p.parse_args(argv)
    methods = list(QUICK_METHODS) if args.quick else (args.methods.split(",") if args.methods else list(METHODS))
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise SystemExit(f"unknown method(s) {unknown}; choose from {list(METHODS)}")
    seeds, epochs = (1, 5) if args.quick else (args.seeds, args.epochs)
    graph, hw = load_planetoid(args.dataset), presets.get(args.hw)
    suffix = "_quick" if args.quick else ""
    store = ResultsStore(Path(args.out) / f"{args.dataset}_gcn_sparsify_quant{suffix}.jsonl")
    done = store.done_keys()
    def key(method, seed):
        return config_key(dict(dataset=args.dataset, hw=args.hw, method=method, seed=seed, epochs=epochs))

    todo = [(m, s) for m in methods for s in range(seeds) if key(m, s) not in done]
    print(f"{len(todo)} runs to do, {len(done)} already in {store.path}", file=sys.stderr)
    for method, seed in tqdm(todo, desc="sparsify_quant", unit="run"):
        cfg, r = run_one(graph, method, seed, hw, epochs)
        store.append(make_record(key(method, seed), {"dataset": args.dataset, "hw": args.hw, **cfg.flat()},
                                 {"method": method, **r}))
    records = [r for r in store.records() if r["method"] in methods]
    rows = summarize(records)
    # bits: per-tensor mean; b/val: element-weighted mean (bits per stored value); per-tensor: x0 w0 x1 w1
    print(f"\n{'method':26s}{'seeds':>6s}{'test acc %':>16s}{'edges':>8s}{'tiles':>7s}{'features':>9s}{'bits':>6s}"
          f"{'b/val':>6s}{'energy':>8s}  per-tensor bits")
    for r in rows:
        per = " ".join(f"{b:.2f}" for b in r["layer_bits"].values())
        print(f"{r['method']:26s}{r['seeds']:6d}{100 * r['test_accuracy']:10.2f} +-{100 * r['test_accuracy_std']:4.2f}"
              f"{r['edge']:8.3f}{r['kept_tiles']:7.3f}{r['feature']:9.3f}{r['mean_bits']:6.2f}"
              f"{r['mean_bits_elements']:6.2f}{r['energy_ratio']:8.3f}  {per}")
    return rows


if __name__ == "__main__":
    main()
