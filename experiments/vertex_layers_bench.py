"""Issue 35 part 1: the conv layers run their vertex program's lowering. Training s/epoch and
memory of GCN, GraphSAGE (mean), GIN, APPNP, R-GCN and GAT before (hand-written forward, the code at
``--base``) and after (this checkout), on Cora and an R-MAT graph (scale 15).

    python experiments/vertex_layers_bench.py --base /tmp/vl-base       # writes results/vertex_layers_bench.json
    python experiments/vertex_layers_bench.py --base /tmp/vl-base --quick

``--base``: a directory holding the old ``codesign`` package (e.g. ``git archive <commit> codesign |
tar -x -C DIR``). Each measurement is one fresh child process (``--child``) importing either
package; children alternate old / new, ``--rounds`` times per (model, graph). A child builds the
model (paper widths of `codesign.models` defaults: hidden 16 for GCN / R-GCN, 64 otherwise),
jits one full-batch training step (forward, backward, Adam), compiles it, runs 2 warm-up steps
and times ``--epochs`` steps (``block_until_ready``); it reports the median step time, XLA's
``memory_analysis()`` of the compiled step (temporaries, arguments, outputs) and the process's
peak RSS (VmHWM), and a hash of the compiled step's optimized HLO with metadata and names
stripped (equal hashes: old and new compile to the same program). The parent reports, per side, the median over rounds of the per-child medians,
their min and max, and the new / old ratio of the medians. R-GCN gets 3 relations (edge type =
edge index mod 3). GAT: the paper's 8 heads x 8, dropout and attention dropout 0.6 (the
default `GAT`); "gat" on the plain edge list (as `codesign.train` runs it), "gat_csr" with a
`CsrPattern` of edges + self-loops attached (scipy's CSR kernels candidates of the chooser). Threads are pinned (one intra-op thread) so that the shared machine's load
moves both sides alike; ``uptime`` is recorded before and after.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import time

MODELS = ("gcn", "sage", "gin", "appnp", "rgcn", "gat", "gat_csr")
GRAPHS = ("cora", "rmat15")


def _load_graph(graph: str):
    """Cora, or the R-MAT graph (scale 15, 16 x 2^15 draws, 64 features, 8 classes, seed 0)."""
    from codesign.data import load_dataset
    from codesign.data.synthetic import rmat_graph
    if graph == "cora":
        return load_dataset("cora")
    return rmat_graph(15, 16 * 2 ** 15, n_features=64, n_classes=8, seed=0)


def _child(args) -> None:
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    import codesign
    from codesign.kernels import CooAdjacency, with_csr_pattern
    from codesign.models import APPNP, GAT, GCN, GIN, RGCN, GraphSAGE
    from codesign.models.rgcn import relation_adjacencies

    g = _load_graph(args.graph)
    rngs = nnx.Rngs(0)
    f, c = g.n_features, g.n_classes
    if args.model == "rgcn":
        g = g.replace(edge_type=jnp.arange(g.n_edges, dtype=jnp.int32) % 3) if hasattr(g, "replace") else \
            __import__("dataclasses").replace(g, edge_type=jnp.arange(g.n_edges, dtype=jnp.int32) % 3)
        adj = relation_adjacencies(g, 3)
        model = RGCN(f, 16, c, n_relations=3, rngs=rngs)
    else:
        adj = CooAdjacency(g.senders, g.receivers, g.edge_weight, g.n_nodes)
        if args.model == "gat_csr":  # scipy's CSR kernels become candidates of the backend chooser
            adj = with_csr_pattern(adj, self_loops=True)
        model = {"gcn": lambda: GCN(f, 16, c, rngs=rngs), "sage": lambda: GraphSAGE(f, 64, c, rngs=rngs),
                 "gin": lambda: GIN(f, 64, c, rngs=rngs), "appnp": lambda: APPNP(f, 64, c, rngs=rngs),
                 "gat": lambda: GAT(f, 8, c, heads=8, rngs=rngs),
                 "gat_csr": lambda: GAT(f, 8, c, heads=8, rngs=rngs)}[args.model]()
    model.train()
    opt = nnx.Optimizer(model, optax.adam(0.01), wrt=nnx.Param)
    graphdef, state = nnx.split((model, opt))
    y, mask = g.y, g.train_mask.astype(jnp.float32)

    def loss_fn(m, x):
        logits = m(x, adj)
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, y)
        return jnp.sum(ce * mask) / jnp.maximum(jnp.sum(mask), 1.0)

    def step(state, x):  # `codesign.train`'s step without the cost terms
        m, o = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, nnx.Param))(m, x)
        o.update(m, grads)
        return nnx.state((m, o)), loss

    compiled = jax.jit(step, donate_argnums=0).lower(state, g.x).compile()
    ma = compiled.memory_analysis()
    # the optimized HLO without metadata (op names, source lines) and instruction / computation
    # names: equal hashes mean old and new compile to the same program
    hlo = re.sub(r", metadata=\{[^}]*\}", "", compiled.as_text())
    hlo = re.sub(r"%[\w.\-]+", "%", hlo)
    hlo = re.sub(r",? ?stack_frame_id=\d+", "", hlo)
    hlo = "\n".join(ln for ln in hlo.splitlines() if ln.lstrip().startswith(("%", "ROOT", "ENTRY", "}")))
    hlo_sha = hashlib.sha256(hlo.encode()).hexdigest()[:16]
    if args.dump_hlo:
        with open(args.dump_hlo, "w") as fh:
            fh.write(hlo)
    state = jax.tree.map(jnp.copy, state)
    for _ in range(2):
        state, loss = compiled(state, g.x)
    jax.block_until_ready(loss)
    times = []
    for _ in range(args.epochs):
        t0 = time.perf_counter()
        state, loss = compiled(state, g.x)
        jax.block_until_ready(loss)
        times.append(time.perf_counter() - t0)
    hwm = 0.0
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                hwm = float(line.split()[1]) / 1024.0
    print(json.dumps({"codesign": codesign.__file__, "s_per_epoch": statistics.median(times),
                      "s_min": min(times), "s_max": max(times), "loss": float(loss), "hlo_sha": hlo_sha,
                      "temp_bytes": int(ma.temp_size_in_bytes), "argument_bytes": int(ma.argument_size_in_bytes),
                      "output_bytes": int(ma.output_size_in_bytes), "peak_rss_mib": hwm,
                      "n_nodes": int(g.n_nodes), "n_edges": int(g.n_edges)}))


def _run(root: str, model: str, graph: str, epochs: int) -> dict:
    env = dict(os.environ, PYTHONPATH=root, OMP_NUM_THREADS="1", JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "--model", model, "--graph", graph,
                          "--epochs", str(epochs)], env=env, cwd=root, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _summary(runs: list) -> dict:
    sec = [r["s_per_epoch"] for r in runs]
    return {"s_per_epoch_median": statistics.median(sec), "s_per_epoch_min": min(sec), "s_per_epoch_max": max(sec),
            "temp_bytes": runs[0]["temp_bytes"], "argument_bytes": runs[0]["argument_bytes"],
            "peak_rss_mib_median": statistics.median(r["peak_rss_mib"] for r in runs),
            "peak_rss_mib_min": min(r["peak_rss_mib"] for r in runs),
            "peak_rss_mib_max": max(r["peak_rss_mib"] for r in runs), "loss": runs[0]["loss"],
            "codesign": runs[0]["codesign"], "hlo_sha": runs[0]["hlo_sha"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", help="directory with the old codesign package")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--graphs", default=",".join(GRAPHS))
    ap.add_argument("--quick", action="store_true", help="Cora only, 1 round, 5 epochs")
    ap.add_argument("--out", default="results/vertex_layers_bench.json")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--model")
    ap.add_argument("--graph")
    ap.add_argument("--dump-hlo", help="(child) write the stripped optimized HLO here")
    args = ap.parse_args()
    if args.child:
        return _child(args)
    if not args.base or not os.path.isdir(os.path.join(args.base, "codesign")):
        raise SystemExit("vertex_layers_bench: --base must be a directory holding the old codesign package")
    if args.quick:
        args.rounds, args.epochs, args.graphs = 1, 5, "cora"
    new_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    load = [os.getloadavg()]
    rows = []
    for graph in args.graphs.split(","):
        for model in args.models.split(","):
            old, new = [], []
            for _ in range(args.rounds):
                old.append(_run(os.path.abspath(args.base), model, graph, args.epochs))
                new.append(_run(new_root, model, graph, args.epochs))
            o, n = _summary(old), _summary(new)
            row = {"model": model, "graph": graph, "n_nodes": old[0]["n_nodes"], "n_edges": old[0]["n_edges"],
                   "old": o, "new": n,
                   "time_ratio": n["s_per_epoch_median"] / o["s_per_epoch_median"],
                   "temp_ratio": n["temp_bytes"] / max(o["temp_bytes"], 1),
                   "rss_ratio": n["peak_rss_mib_median"] / o["peak_rss_mib_median"],
                   "loss_abs_diff": abs(n["loss"] - o["loss"]), "same_hlo": n["hlo_sha"] == o["hlo_sha"]}
            rows.append(row)
            print(f"{graph:7s} {model:6s} old {o['s_per_epoch_median'] * 1e3:8.2f} ms "
                  f"[{o['s_per_epoch_min'] * 1e3:.2f}, {o['s_per_epoch_max'] * 1e3:.2f}]  new "
                  f"{n['s_per_epoch_median'] * 1e3:8.2f} ms [{n['s_per_epoch_min'] * 1e3:.2f}, "
                  f"{n['s_per_epoch_max'] * 1e3:.2f}]  ratio {row['time_ratio']:.3f}  temp {o['temp_bytes']}"
                  f" -> {n['temp_bytes']}  rss {o['peak_rss_mib_median']:.0f} -> {n['peak_rss_mib_median']:.0f} MiB"
                  f"  |dloss| {row['loss_abs_diff']:.2e}  same HLO {row['same_hlo']}", flush=True)
    load.append(os.getloadavg())
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump({"what": "issue 35 part 1: hand-written conv forward (old) vs the vertex program's lowering (new)",
                   "rounds": args.rounds, "epochs_per_child": args.epochs, "threads": "1 intra-op, OMP 1",
                   "loadavg_before_after": load, "rows": rows}, fh, indent=1)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
