"""The backend chooser (`codesign.kernels.auto_impl`, by modeled cost) against the fixed thresholds
it replaced: training s/epoch of a 2-layer GCN and a 2-layer GAT (8 heads x 8, dropout and
attention dropout 0.6) on Cora and on an R-MAT graph (2^15 nodes, `codesign.data.rmat_graph`).

    OMP_NUM_THREADS=1 python experiments/backend_chooser_bench.py [--reps 15] [--graphs cora rmat]
    # writes results/backend_chooser_bench.json

"before" runs the same models with the old rules patched in for ``impl="auto"`` (copied below:
`aggregate` took scipy's CSR kernel when a `CsrPattern` was attached, on CPU, and E x F >= 2^20
(`CSR_AUTO_MIN_WORK`), else segment_sum; GAT's attention took the CSR path whenever the
adjacency carried a `CsrPattern` on CPU, else the reference); "after" runs ``impl="auto"`` as it
is now. Both sides get the adjacency with a `CsrPattern` over edges + self-loops attached (as
`experiments/vertex_bench.py` does), the same init, data and Adam; one full-batch step (forward,
backward, update) is an epoch. Both steps are compiled first, then ``--reps`` epochs alternate
before / after in one process; per side the median, min and max, the backends it resolved
(recorded at trace time, `codesign.kernels.recorded_choices`), and the median ratio after / before.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
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
from codesign.kernels import api  # noqa: E402
from codesign.kernels.coo import CooAdjacency  # noqa: E402
from codesign.kernels.csr_cpu import CsrPattern  # noqa: E402
from codesign.models import GAT, GCN  # noqa: E402
from codesign.models import gat as gat_module  # noqa: E402

OLD_CSR_AUTO_MIN_WORK = 1 << 20


def old_auto_impl(adj, x, *, op="spmm", heads=1, hw=None, allowed=None):
    """The rules before the chooser (kernels/api.py, kernels/gat.py, models/gat.py `_uses_csr`)."""
    cpu = jax.default_backend() == "cpu"
    if op == "attention":
        name = "csr" if isinstance(getattr(adj, "pattern", None), CsrPattern) and cpu else "reference"
        name = name if allowed is None or name in allowed else "reference"
    else:
        name = api.candidates(adj, x, op)[0]
        if isinstance(adj, CooAdjacency):
            big = adj.n_edges * (x.shape[1] if x.ndim == 2 else 1) >= OLD_CSR_AUTO_MIN_WORK
            name = "csr_scipy" if isinstance(adj.pattern, CsrPattern) and cpu and big else "segment"
    api._note("aggregate" if op == "spmm" else op, name)
    return name


@contextlib.contextmanager
def rules(side: str):
    if side == "after":
        yield
        return
    saved = api.auto_impl, gat_module.auto_impl
    api.auto_impl = gat_module.auto_impl = old_auto_impl
    try:
        yield
    finally:
        api.auto_impl, gat_module.auto_impl = saved


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

    with rules(side), kernels.recorded_choices() as chosen:
        compiled = jax.jit(step, donate_argnums=0).lower(state, *data(p)).compile()
    return compiled, state, chosen


def time_pair(model: str, p, reps: int) -> dict:
    sides = {}
    for side in ("before", "after"):
        compiled, state, chosen = build(model, p, side)
        state, _ = jax.block_until_ready(compiled(state, *data(p)))
        sides[side] = dict(compiled=compiled, state=state, chosen=chosen, times=[])
    for _ in range(reps):
        for side in ("before", "after"):
            s = sides[side]
            t0 = time.perf_counter()
            s["state"], loss = jax.block_until_ready(s["compiled"](s["state"], *data(p)))
            s["times"].append(time.perf_counter() - t0)
    out = {}
    for side, s in sides.items():
        t = np.asarray(s["times"])
        out[side] = {"backend": s["chosen"], "epoch_s_median": float(np.median(t)), "epoch_s_min": float(t.min()),
                     "epoch_s_max": float(t.max()), "epoch_s": [float(v) for v in t]}
    out["ratio_after_over_before"] = out["after"]["epoch_s_median"] / out["before"]["epoch_s_median"]
    out["same_backends"] = out["after"]["backend"] == out["before"]["backend"]
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--graphs", nargs="+", default=["cora", "rmat"])
    ap.add_argument("--models", nargs="+", default=["gcn", "gat"])
    ap.add_argument("--rmat-scale", type=int, default=15)
    ap.add_argument("--rmat-draws", type=int, default=280_000)
    ap.add_argument("--out", default="results/backend_chooser_bench.json")
    a = ap.parse_args(argv)
    res = {"what": __doc__.strip().splitlines()[0], "command": "OMP_NUM_THREADS=1 python experiments/backend_chooser_bench.py "
           + " ".join(argv if argv is not None else sys.argv[1:]),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "host": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "jax": jax.__version__,
                    "backend": jax.default_backend(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")},
           "load_before": os.getloadavg(), "reps": a.reps, "callback_overhead_s": api.callback_overhead_s(),
           "preset": api.device_preset().name, "runs": {}}
    for g in a.graphs:
        p = load_problem(g, False, a.rmat_scale, a.rmat_draws)
        for model in a.models:
            r = time_pair(model, p, a.reps)
            r["graph"] = {"n_nodes": int(p.x.shape[0]), "n_edges": int(p.adj.n_edges)}
            res["runs"][f"{g}/{model}"] = r
            print(g, model, {k: (v["backend"], round(v["epoch_s_median"], 4)) for k, v in r.items()
                             if k in ("before", "after")}, "ratio", round(r["ratio_after_over_before"], 3), flush=True)
    res["load_after"] = os.getloadavg()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    return res


if __name__ == "__main__":
    main()
