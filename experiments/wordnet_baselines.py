"""Full-batch baselines on WordNet 3.0 (`codesign.data.load_wordnet`: 117,659 synsets, 45
lexicographer classes, symmetrized pointer graph, binary gloss bag of words, stratified 60/20/20).

    python experiments/wordnet_baselines.py                          # gcn sage rgcn mlp, 3 seeds, 100 epochs
    python experiments/wordnet_baselines.py --models gat --epochs 1 --seeds 1   # GAT: one epoch, timed
    python experiments/wordnet_baselines.py --quick                  # smoke run: gcn + mlp, 1 seed, 2 epochs

Each run trains with the existing loop, ``codesign.train.train(graph, TrainConfig.for_model(model,
epochs=...), presets.get("cpu"))`` (the models' `MODEL_DEFAULTS`, their Cora settings), and is
appended to ``results/wordnet_baselines.jsonl`` (`codesign.results.ResultsStore`; resumable: a
stored (model, seed, epochs, vocab_size) is skipped). Recorded per run: test/val accuracy,
``s_per_epoch`` = ``train_time_s / epochs`` (the first epoch includes jit compilation),
``peak_rss_gb`` = the process's peak resident set so far (``ru_maxrss``: the load plus every run
of this process; run one model per process for a per-model peak).

Models: gcn, sage, gat, rgcn from `codesign.models`, and "mlp" = the GCN on the graph with every
edge removed (`without_edges`: ``graph.keep_edges(np.zeros(E, bool))`` plus two placeholder nodes
joined by one edge, as the cost model refuses E = 0): with only the self-loops GCN adds, its
normalized adjacency is the identity on every real node, so it is a 2-layer MLP on the features. R-GCN through
`codesign.train.train` sees one untyped adjacency, i.e. a single relation (see
`codesign.models.MODEL_DEFAULTS`), not WordNet's 26 pointer types.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

MODELS = ("gcn", "sage", "gat", "rgcn", "mlp")


def peak_rss_gb() -> float:
    """Peak resident set of this process in GB (10^9 bytes; Linux ``ru_maxrss`` is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def without_edges(graph):
    """``graph.keep_edges(np.zeros(E, bool))`` plus two unlabelled placeholder nodes joined by one
    edge (zero features, label 0, in no mask): `codesign.train.train` costs the model with
    `codesign.hwmodel.measure_locality`, which refuses a graph without edges. Every real node is
    then isolated, so the GCN on it is a 2-layer MLP on the real nodes' features; the placeholders
    enter neither the loss nor the accuracy."""
    import jax.numpy as jnp

    empty = graph.keep_edges(np.zeros(graph.n_edges, bool))
    pad = lambda a, v: jnp.concatenate([jnp.asarray(a), jnp.full((2, *a.shape[1:]), v, a.dtype)])
    n = graph.n_nodes
    return empty.replace(senders=jnp.asarray([n], jnp.int32), receivers=jnp.asarray([n + 1], jnp.int32),
                         x=pad(graph.x, 0), y=pad(graph.y, 0), train_mask=pad(graph.train_mask, False),
                         val_mask=pad(graph.val_mask, False), test_mask=pad(graph.test_mask, False),
                         n_nodes=n + 2)


def summarize(records: list[dict]) -> list[dict]:
    """Per (model, epochs): seeds, test accuracy mean and std (population), mean s/epoch, max peak RSS."""
    rows = []
    for model, epochs in sorted({(r["model"], r["epochs"]) for r in records}):
        rs = [r for r in records if (r["model"], r["epochs"]) == (model, epochs)]
        acc = np.array([r["test_accuracy"] for r in rs])
        rows.append(dict(model=model, epochs=epochs, seeds=len(rs), test_accuracy=float(acc.mean()),
                         test_accuracy_std=float(acc.std()), s_per_epoch=float(np.mean([r["s_per_epoch"] for r in rs])),
                         peak_rss_gb=float(max(r["peak_rss_gb"] for r in rs))))
    return rows


def main(argv=None) -> list[dict]:
    from codesign.data import load_wordnet
    from codesign.hwmodel import presets
    from codesign.experiment import make_record
    from codesign.results import ResultsStore, config_key
    from codesign.train import TrainConfig, train

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="gcn,sage,rgcn,mlp", help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--vocab-size", type=int, default=None, help="feature width (default: load_wordnet's)")
    p.add_argument("--root", default=None, help="folder holding wordnet/data.* or data.* (default: load_wordnet's search)")
    p.add_argument("--out", default="results")
    p.add_argument("--quick", action="store_true", help="smoke run: gcn + mlp, 1 seed, 2 epochs")
    args = p.parse_args(argv)
    models = ["gcn", "mlp"] if args.quick else args.models.split(",")
    bad = [m for m in models if m not in MODELS]
    if bad:
        p.error(f"--models: unknown {', '.join(bad)}; choose from {', '.join(MODELS)}")
    seeds, epochs = (1, 2) if args.quick else (args.seeds, args.epochs)
    store = ResultsStore(Path(args.out) / f"wordnet_baselines{'_quick' if args.quick else ''}.jsonl")
    store.check_writable()
    t0 = time.perf_counter()
    graph, info = load_wordnet(args.root, **({} if args.vocab_size is None else {"vocab_size": args.vocab_size}),
                               return_info=True)
    load_s = time.perf_counter() - t0
    print(f"WordNet: {graph.n_nodes} nodes, {graph.n_edges} edges, {graph.n_features} features, "
          f"{graph.n_classes} classes, split {info.split_hash[:12]}, loaded in {load_s:.1f} s", flush=True)
    hw = presets.get("cpu")
    for model in models:
        g = without_edges(graph) if model == "mlp" else graph
        for seed in range(seeds):
            cfg = TrainConfig.for_model("gcn" if model == "mlp" else model, epochs=epochs, seed=seed)
            key = config_key(dict(dataset="wordnet", model=model, seed=seed, epochs=epochs,
                                  vocab_size=graph.n_features, split_hash=info.split_hash))
            if store.has(key):
                continue
            r = train(g, cfg, hw)
            rec = make_record(key, cfg.flat(), dict(
                dataset="wordnet", model=model, seed=seed, epochs=epochs, vocab_size=graph.n_features,
                split_hash=info.split_hash, n_nodes=graph.n_nodes, n_edges=g.n_edges,
                test_accuracy=r["test_accuracy"], val_accuracy=r["val_accuracy"], train_accuracy=r["train_accuracy"],
                selected_epoch=r["selected_epoch"], train_time_s=r["train_time_s"],
                s_per_epoch=r["train_time_s"] / epochs, peak_rss_gb=peak_rss_gb(), load_s=load_s))
            store.append(rec)
            print(f"{model} seed {seed}: test {r['test_accuracy']:.4f} val {r['val_accuracy']:.4f} "
                  f"{rec['s_per_epoch']:.2f} s/epoch, peak RSS {rec['peak_rss_gb']:.2f} GB", flush=True)
    rows = summarize([r for r in store.records() if r.get("model") in models])
    for row in rows:
        print(f"{row['model']:5s} {row['epochs']:4d} epochs x {row['seeds']} seeds: test "
              f"{100 * row['test_accuracy']:.2f} +- {100 * row['test_accuracy_std']:.2f} %, "
              f"{row['s_per_epoch']:.2f} s/epoch, peak RSS {row['peak_rss_gb']:.2f} GB")
    return rows


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
