"""Per-device memory of partitioned GCN training with and without edge gates and rematerialization
(issue 38: "with edge gates and rematerialization, per-process memory <= 1.2x the plain GCN's").

    python experiments/remat_memory.py            # R-MAT 2^17, P = 4, hidden 64 -> results/remat_memory_cpu.json
    python experiments/remat_memory.py --quick    # R-MAT 2^11 (tests)

For each of (plain GCN, GCN with edge gates) x (remat on, off) the training step (loss and gradient
of every parameter, `codesign.distributed.loss_fn`) is compiled for a P-device mesh of host-platform
devices (``XLA_FLAGS=--xla_force_host_platform_device_count=P``, set below before JAX starts) and
its per-device memory read from XLA's buffer assignment: ``temp + argument + output`` bytes of
``compiled.memory_analysis()`` (the measure of `experiments/scaling.py`; generated code not
counted). Also: the ``collective-permute`` ops of the compiled program (forward, gradient, and with
edge gates the backward's re-fetch of the halo) and the loss and the sum of |gradient| of one step, equal
with remat on and off. Edge gates are the model's hard-concrete gates on the partition's edge slots
(`codesign.distributed.PartitionedEdgeMask`), sampled as in training.
"""

from __future__ import annotations

import os

P_DEVICES = 4
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={P_DEVICES}".strip()

import argparse  # noqa: E402
import datetime  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codesign import distributed as dist  # noqa: E402
from codesign.data import rmat_graph  # noqa: E402
from codesign.models import GCN  # noqa: E402
from codesign.results import write_json_atomic  # noqa: E402

FULL = dict(scale=17, features=64, hidden=64, classes=8)
QUICK = dict(scale=11, features=32, hidden=32, classes=4)


def measure(graph, part, mesh, hidden: int, classes: int, gates: bool, remat: bool) -> dict:
    """Compile and run one training step; memory (bytes per device), permutes, loss, |grad|."""
    m = GCN(graph.n_features, hidden, classes, dropout=0.5, n_edges=graph.n_edges if gates else None, rngs=nnx.Rngs(0))
    if gates:
        dist.partition_edge_mask(m, part, mesh, rngs=nnx.Rngs(0))
    m.train()
    gd, state = nnx.split(m)
    sg = dist.shard_graph(graph, part, mesh)

    def step(state, sg):
        mm = nnx.merge(gd, state)
        return nnx.value_and_grad(lambda mm: dist.loss_fn(mm, sg, mesh, remat=remat))(mm)

    compiled = jax.jit(step).lower(state, sg).compile()
    ma = compiled.memory_analysis()
    loss, grads = compiled(state, sg)
    mem = {"temp_bytes": int(ma.temp_size_in_bytes), "argument_bytes": int(ma.argument_size_in_bytes),
           "output_bytes": int(ma.output_size_in_bytes)}
    mem["peak_bytes"] = mem["temp_bytes"] + mem["argument_bytes"] + mem["output_bytes"]
    return {"gates": gates, "remat": remat, "memory": mem,
            "collective_permute_ops": dist.collective_permute_bytes(compiled.as_text())["ops"],
            "loss": float(loss), "grad_abs_sum": float(sum(jnp.sum(jnp.abs(x)) for x in jax.tree.leaves(grads)))}


def run(quick: bool) -> dict:
    cfg = QUICK if quick else FULL
    graph = rmat_graph(cfg["scale"], 16 << cfg["scale"], n_features=cfg["features"], n_classes=cfg["classes"], seed=0)
    part = dist.partition_graph(np.asarray(graph.senders), np.asarray(graph.receivers), graph.n_nodes, P_DEVICES)
    mesh = dist.make_mesh(P_DEVICES)
    runs = []
    for gates in (False, True):
        for remat in (True, False):
            r = measure(graph, part, mesh, cfg["hidden"], cfg["classes"], gates, remat)
            runs.append(r)
            print(f"gates={gates!s:5} remat={remat!s:5}: {r['memory']['peak_bytes'] / 1e6:8.1f} MB/device, "
                  f"{r['collective_permute_ops']} collective-permutes, loss {r['loss']:.6f}", flush=True)
    peak = {(r["gates"], r["remat"]): r["memory"]["peak_bytes"] for r in runs}
    return {"experiment": "remat_memory", "quick": quick,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "jax_version": jax.__version__, "devices": P_DEVICES,
            "graph": {"kind": "rmat", "scale": cfg["scale"], "draws": 16 << cfg["scale"], "n_nodes": graph.n_nodes,
                      "n_edges": graph.n_edges, "features": cfg["features"]},
            "model": {"name": "gcn", "hidden": cfg["hidden"], "classes": cfg["classes"], "dropout": 0.5},
            "memory_fields": "temp + argument + output bytes of compiled.memory_analysis() (per device)",
            "runs": runs,
            "gates_remat_over_plain": peak[(True, True)] / peak[(False, True)],
            "gates_no_remat_over_gates_remat": peak[(True, False)] / peak[(True, True)]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small graph (tests)")
    ap.add_argument("--out", default=None, help="output JSON (default results/remat_memory_cpu[_quick].json)")
    args = ap.parse_args(argv)
    if len(jax.devices()) < P_DEVICES:
        raise SystemExit(f"remat_memory.py: needs {P_DEVICES} devices, have {len(jax.devices())}")
    out = run(args.quick)
    path = Path(args.out) if args.out else ROOT / "results" / f"remat_memory_cpu{'_quick' if args.quick else ''}.json"
    write_json_atomic(path, out)
    print(f"edge gates + remat / plain: {out['gates_remat_over_plain']:.3f}; "
          f"gates without remat / with: {out['gates_no_remat_over_gates_remat']:.2f}; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
