"""The backend chooser (`codesign.kernels.auto_impl`, by modeled cost) against the fixed thresholds
it replaced: training s/epoch of a 2-layer GCN and a 2-layer GAT (8 heads x 8, dropout and
attention dropout 0.6) on Cora and on an R-MAT graph (2^15 nodes, `codesign.data.rmat_graph`).

    OMP_NUM_THREADS=1 python experiments/backend_chooser_bench.py [--reps 15] [--graphs cora rmat]
    # writes results/backend_chooser_bench.json

"before" runs the code without the chooser (``--before-root``, default /work/main: there
``impl="auto"`` meant fixed rules: scipy's CSR kernel for `aggregate` when a `CsrPattern` was
attached, on CPU, and E x F >= 2^20, else segment_sum; GAT's multi-head CSR path whenever the
adjacency carried a `CsrPattern` on CPU, else its reference / head-expanded edge path); "after"
this checkout (`codesign.kernels.auto_impl` by modeled cost; GATConv through its vertex program).
Both sides get the adjacency with a `CsrPattern` over edges + self-loops attached (as
`experiments/vertex_bench.py` does), the same init, data and Adam; one full-batch step (forward,
backward, update) is an epoch. Sides alternate by process (``--rounds`` rounds, each a fresh
process per side: compile, one untimed step, ``--reps`` timed epochs); per side the median, min
and max over all timed epochs, the backends "after" resolved (recorded at trace time,
`codesign.kernels.recorded_choices`), and the median ratio after / before.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vertex_bench import GAT_HIDDEN, HEADS, data, load_problem  # noqa: E402

from codesign import kernels  # noqa: E402
from codesign.models import GAT, GCN  # noqa: E402

def build(model: str, p, side: str):
    n_cls, f = int(p.y.max()) + 1, p.x.shape[1]
    rngs = nnx.Rngs(params=0, dropout=1)
    if model == "gcn":
        m = GCN(f, 16 if p.name == "cora" else 64, n_cls, dropout=0.5, rngs=rngs)
    else:
        m = GAT(f, GAT_HIDDEN, n_cls, heads=HEADS, dropout=0.6, rngs=rngs)
    m.train()
    tx = optax.chain(optax.add_decayed_weights(5e-4), optax.adam(0.01 if model == "gcn" else 0.005))
    graphdef, state = nnx.split((m, nnx.Optimizer(m, tx, wrt=nnx.Param)))

    def loss_fn(mm, x, y, mask, adj):
        ce = optax.softmax_cross_entropy_with_integer_labels(mm(x, adj), y)
        return jnp.sum(ce * mask) / jnp.maximum(mask.sum(), 1.0)

    def step(state, x, y, mask, adj, loops):
        mm, opt = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(loss_fn)(mm, x, y, mask, adj)
        opt.update(mm, grads)
        return nnx.state((mm, opt)), loss

    rec = getattr(kernels, "recorded_choices", None)  # absent in the "before" code
    with (rec() if rec else contextlib.nullcontext({})) as chosen:
        compiled = jax.jit(step, donate_argnums=0).lower(state, *data(p)).compile()
    return compiled, state, chosen


def child(graph: str, model: str, reps: int, rmat_scale: int, rmat_draws: int) -> dict:
    """One side in this process: compile, one untimed step, then ``reps`` timed epochs."""
    p = load_problem(graph, False, rmat_scale, rmat_draws)
    compiled, state, chosen = build(model, p, "")
    state, _ = jax.block_until_ready(compiled(state, *data(p)))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        state, _ = jax.block_until_ready(compiled(state, *data(p)))
        times.append(time.perf_counter() - t0)
    return {"backend": chosen, "epoch_s": times, "n_nodes": int(p.x.shape[0]), "n_edges": int(p.adj.n_edges)}


def time_pair(graph: str, model: str, a) -> dict:
    """Alternating processes: "before" with the code at ``--before-root`` on PYTHONPATH, "after"
    with this checkout's; ``--rounds`` rounds of ``--reps`` epochs each."""
    here = str(Path(__file__).resolve().parents[1])
    sides = {"before": {"times": []}, "after": {"times": []}}
    for _ in range(a.rounds):
        for side, root in (("before", a.before_root), ("after", here)):
            env = {**os.environ, "PYTHONPATH": root}
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", graph, model, "--reps", str(a.reps),
                   "--rmat-scale", str(a.rmat_scale), "--rmat-draws", str(a.rmat_draws)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=root)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            sides[side]["times"] += r["epoch_s"]
            sides[side]["backend"] = r["backend"]
            graph_size = {"n_nodes": r["n_nodes"], "n_edges": r["n_edges"]}
    out = {"graph": graph_size}
    for side, s in sides.items():
        t = np.asarray(s["times"])
        out[side] = {"backend": s["backend"], "epoch_s_median": float(np.median(t)), "epoch_s_min": float(t.min()),
                     "epoch_s_max": float(t.max()), "epoch_s": [float(v) for v in t]}
    out["ratio_after_over_before"] = out["after"]["epoch_s_median"] / out["before"]["epoch_s_median"]
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--graphs", nargs="+", default=["cora", "rmat"])
    ap.add_argument("--models", nargs="+", default=["gcn", "gat"])
    ap.add_argument("--rmat-scale", type=int, default=15)
    ap.add_argument("--rmat-draws", type=int, default=280_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--before-root", default="/work/main", help="checkout with the code before the chooser")
    ap.add_argument("--out", default="results/backend_chooser_bench.json")
    ap.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(*a.child, a.reps, a.rmat_scale, a.rmat_draws)))
        return {}
    res = {"what": __doc__.strip().splitlines()[0], "command": "OMP_NUM_THREADS=1 python experiments/backend_chooser_bench.py "
           + " ".join(argv if argv is not None else sys.argv[1:]),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "host": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "jax": jax.__version__,
                    "backend": jax.default_backend(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")},
           "load_before": os.getloadavg(), "reps": a.reps, "rounds": a.rounds, "before_root": a.before_root,
           "before_commit": subprocess.run(["git", "-C", a.before_root, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),  "runs": {}}
    for g in a.graphs:
        for model in a.models:
            r = time_pair(g, model, a)
            res["runs"][f"{g}/{model}"] = r
            print(g, model, {k: (v["backend"], round(v["epoch_s_median"], 4)) for k, v in r.items()
                             if k in ("before", "after")}, "ratio", round(r["ratio_after_over_before"], 3), flush=True)
    res["load_after"] = os.getloadavg()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    return res


if __name__ == "__main__":
    main()
