"""Per-device memory and communication of partitioned full-batch GCN training vs device count.

    python experiments/scaling.py            # R-MAT scale 15, P = 1, 2, 4, 8 -> results/scaling_cpu.json
    python experiments/scaling.py --quick    # small graph -> results/scaling_cpu_quick.json

On CPU the P devices are host-platform devices (``XLA_FLAGS=--xla_force_host_platform_device_count=8``,
set below before JAX starts). For each P the training step (loss + gradient of every parameter,
`codesign.distributed.loss_fn` under `nnx.value_and_grad`) is compiled for the mesh, and

* per-device peak memory = ``temp_size_in_bytes + argument_size_in_bytes + output_size_in_bytes``
  of ``jax.jit(...).lower(...).compile().memory_analysis()`` (XLA's buffer assignment of the
  per-device SPMD program; ``alias_size_in_bytes`` is 0 here and generated code is not counted);
* scaling efficiency = ``mem(1) / (P * mem(P))`` (1 = linear);
* bytes exchanged = ``collective-permute`` bytes of the compiled program per device
  (`codesign.distributed.collective_permute_bytes`), beside the model's padded and real halo bytes
  (`codesign.distributed.comm_stages`);
* the loss of one step (equal for every P up to float32 rounding).
"""

from __future__ import annotations

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):  # keep flags set before
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8".strip()

import argparse  # noqa: E402
import datetime  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codesign import distributed as dist  # noqa: E402
from codesign.data.synthetic import rmat_edges  # noqa: E402
from codesign.graph import Graph  # noqa: E402
from codesign.models import GCN  # noqa: E402
from codesign.results import write_json_atomic  # noqa: E402

FULL = dict(scale=15, draws=16 << 15, features=64, hidden=64, classes=8, parts=(1, 2, 4, 8))
QUICK = dict(scale=10, draws=16 << 10, features=32, hidden=16, classes=4, parts=(1, 2, 4, 8))


def rmat_graph(scale: int, draws: int, features: int, classes: int, seed: int = 0) -> Graph:
    """R-MAT graph (Graph500 parameters) with uniform random features, labels and a 50 % train split."""
    s, r = rmat_edges(scale, draws, seed=seed)
    n = 1 << scale
    rng = np.random.default_rng(seed)
    return Graph(senders=jnp.asarray(s), receivers=jnp.asarray(r),
                 x=jnp.asarray(rng.random((n, features), np.float32)), y=jnp.asarray(rng.integers(0, classes, n), jnp.int32),
                 train_mask=jnp.asarray(rng.random(n) < 0.5), val_mask=jnp.asarray(rng.random(n) < 0.25),
                 test_mask=jnp.asarray(rng.random(n) < 0.25), n_nodes=n)


def measure(graph: Graph, n_parts: int, hidden: int, classes: int, int8: bool = False) -> dict:
    """Compiles and runs one training step on ``n_parts`` devices; memory, bytes and loss."""
    t0 = time.perf_counter()
    part = dist.partition_graph(np.asarray(graph.senders), np.asarray(graph.receivers), graph.n_nodes, n_parts)
    t_part = time.perf_counter() - t0
    mesh = dist.make_mesh(n_parts)
    sg = dist.shard_graph(graph, part, mesh)
    model = GCN(graph.n_features, hidden, classes, dropout=0.5, rngs=nnx.Rngs(0))
    model.train()
    gd, state = nnx.split(model)

    def step(state, sg):
        m = nnx.merge(gd, state)
        return nnx.value_and_grad(lambda m: dist.loss_fn(m, sg, mesh, int8_halo=int8))(m)

    t0 = time.perf_counter()
    compiled = jax.jit(step).lower(state, sg).compile()
    t_compile = time.perf_counter() - t0
    ma = compiled.memory_analysis()
    t0 = time.perf_counter()
    loss, _ = compiled(state, sg)
    loss = float(loss)
    t_step = time.perf_counter() - t0
    hlo = dist.collective_permute_bytes(compiled.as_text())
    modeled_padded = sum(float(s.total_bytes) for s in dist.comm_stages(model, part, training=True, int8=int8, padded=True))
    modeled_real = sum(float(s.total_bytes) for s in dist.comm_stages(model, part, training=True, int8=int8))
    mem = {"temp_bytes": int(ma.temp_size_in_bytes), "argument_bytes": int(ma.argument_size_in_bytes),
           "output_bytes": int(ma.output_size_in_bytes), "alias_bytes": int(ma.alias_size_in_bytes),
           "generated_code_bytes": int(ma.generated_code_size_in_bytes)}
    mem["peak_bytes"] = mem["temp_bytes"] + mem["argument_bytes"] + mem["output_bytes"]
    return {"devices": n_parts, "int8_halo": int8, "memory": mem, "loss": loss,
            "exchanged_bytes_per_device_hlo": hlo["total"], "collective_permute_ops": hlo["ops"],
            # every device ships the same padded buffers, so the program's per-device bytes x P
            "exchanged_bytes_all_devices_hlo": hlo["total"] * n_parts,
            "modeled_bytes_padded": modeled_padded, "modeled_bytes_halo_rows": modeled_real,
            "partition": part.summary(), "partition_s": t_part, "compile_s": t_compile, "first_step_s": t_step}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small graph (tests)")
    ap.add_argument("--out", default=None, help="output JSON (default results/scaling_cpu[_quick].json)")
    args = ap.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    if len(jax.devices()) < max(cfg["parts"]):
        raise SystemExit(f"scaling.py: needs {max(cfg['parts'])} devices, have {len(jax.devices())} "
                         f"(XLA_FLAGS was {os.environ.get('XLA_FLAGS')!r} when JAX started)")
    graph = rmat_graph(cfg["scale"], cfg["draws"], cfg["features"], cfg["classes"])
    runs = []
    for p in cfg["parts"]:
        r = measure(graph, p, cfg["hidden"], cfg["classes"])
        runs.append(r)
        print(f"P={p}: peak {r['memory']['peak_bytes'] / 1e6:8.2f} MB/device, exchanged "
              f"{r['exchanged_bytes_per_device_hlo'] / 1e6:6.2f} MB/device, loss {r['loss']:.6f}, "
              f"edge cut {r['partition']['edge_cut_fraction']:.2f}", flush=True)
    int8 = None if args.quick else measure(graph, max(cfg["parts"]), cfg["hidden"], cfg["classes"], int8=True)
    m1 = runs[0]["memory"]["peak_bytes"]
    eff = {str(r["devices"]): m1 / (r["devices"] * r["memory"]["peak_bytes"]) for r in runs}
    out = {
        "experiment": "scaling", "quick": args.quick,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": f"{jax.devices()[0].device_kind} x{len(jax.devices())} (host platform), {platform.processor() or platform.machine()}",
        "os_cpu_count": os.cpu_count(), "jax_version": jax.__version__, "backend": jax.default_backend(),
        "graph": {"kind": "rmat", "scale": cfg["scale"], "draws": cfg["draws"], "n_nodes": graph.n_nodes,
                  "n_edges": graph.n_edges, "features": cfg["features"]},
        "model": {"name": "gcn", "hidden": cfg["hidden"], "classes": cfg["classes"], "dropout": 0.5},
        "memory_fields": "temp + argument + output bytes of compiled.memory_analysis() (per device)",
        "runs": runs, "int8_halo_run": int8, "memory_scaling_efficiency": eff,
    }
    path = Path(args.out) if args.out else ROOT / "results" / f"scaling_cpu{'_quick' if args.quick else ''}.json"
    write_json_atomic(path, out)
    print("memory scaling efficiency mem(1)/(P mem(P)):", {k: round(v, 3) for k, v in eff.items()})
    if int8 is not None:
        print(f"int8 halo at P={int8['devices']}: exchanged {int8['exchanged_bytes_per_device_hlo'] / 1e6:.2f} "
              f"MB/device, loss {int8['loss']:.6f}")
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
