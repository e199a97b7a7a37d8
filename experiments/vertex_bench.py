"""Vertex programs vs hand-written layers: training s/epoch, memory, and the GAT [E, heads, F] check.

    python experiments/vertex_bench.py            # Cora + R-MAT (scale 15), writes results/vertex_bench_cpu.json
    python experiments/vertex_bench.py --quick    # CI smoke run (Cora-sized random graph, few epochs)

What is compared: a 2-layer GCN (Kipf & Welling 2017) and a 2-layer GAT (8 heads x 8, Velickovic
et al. 2018), each once as the hand-written `codesign.models` model and once with the same
parameters, dropout and optimizer but both aggregations run by the vertex programs of
`codesign.vertex.layers` (GAT: the one-head program vmapped over the heads). Both sides get the
adjacency with a `CsrPattern` attached (``impl="auto"``, as ``experiments/bench_train.py``'s "auto"), so
on this CPU both run the same kernels where the program fuses (scipy CSR SpMM for GCN when
E x F >= 2^20; edge softmax + multi-head CSR SpMM for GAT). Attention dropout is off on both
sides (a vertex program has no dropout op; with it on, the hand-written GAT would leave its fused
path). One training step (forward, backward, Adam) is an epoch (full batch).

Timing: both jitted steps compiled first, then ``--reps`` epochs each, alternating vertex / hand
in one process; median, min and max per side and the median ratio. Memory: the compiled step's
XLA `memory_analysis()` (temporaries, arguments, outputs) per side, and, unless ``--no-rss``, the
peak RSS of each side measured in its own fresh process (compile + 3 steps; VmHWM above the RSS
after loading the graph, during compile + first step, and in the 3 steps after it). GAT check:
the largest array with an edge-sized dimension (E', E' x heads, E' x F, E' x heads x F; E' =
edges + self-loops) that any instruction of the compiled vertex train step's optimized HLO
produces must have fewer than E' x heads x F elements, so no [E', heads, F] tensor exists in it; the same check on the vertex
program lowered through the XLA reference (which does form it) shows that the check can fail.
XLA's temporaries (`memory_analysis().temp_size_in_bytes`) are reported beside.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from codesign.graph import add_self_loops
from codesign.kernels import CooAdjacency, with_csr_pattern
from codesign.models import GAT, GCN
from codesign.results import write_json_atomic
from codesign.vertex.layers import degree_norm, gat, gcn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pyg_child import peak_mib, reset_peak, rss_mib  # noqa: E402  bench_train.py's memory definition

HEADS, GAT_HIDDEN = 8, 8


@dataclasses.dataclass(frozen=True)
class Problem:
    """One benchmark graph on device: x [N, F], y [N], train mask [N] float, ``adj`` (E edges,
    CsrPattern over edges + self-loops) and ``loops`` (E + N edges with its own CsrPattern)."""

    name: str
    x: jax.Array
    y: jax.Array
    mask: jax.Array
    adj: CooAdjacency
    loops: CooAdjacency


def load_problem(name: str, quick: bool, rmat_scale: int, rmat_draws: int) -> Problem:
    if name == "cora" and not quick:
        from codesign.data import load_planetoid
        g = load_planetoid("cora", root=os.environ.get("CODESIGN_DATA"))
    else:
        from codesign.data import rmat_graph
        scale, draws = (10, 4000) if quick else (rmat_scale, rmat_draws)
        g = rmat_graph(scale, draws, n_features=64, n_classes=8, seed=0)
    n = g.n_nodes
    adj = CooAdjacency(jnp.asarray(g.senders, jnp.int32), jnp.asarray(g.receivers, jnp.int32), None, n)
    s, r = add_self_loops(adj.senders, adj.receivers, n)
    loops = with_csr_pattern(CooAdjacency(s, r, None, n))
    return Problem(name, jnp.asarray(g.x, jnp.float32), jnp.asarray(g.y, jnp.int32),
                   jnp.asarray(g.train_mask, jnp.float32), with_csr_pattern(adj, self_loops=True), loops)


# --------------------------------------------------------------------- the vertex-program models

def vertex_gcn(m: GCN, x, loops: CooAdjacency):
    """`GCN.__call__` with both aggregations run by the `gcn` vertex program (``loops``: the
    edges with the self-loops appended)."""
    norm = degree_norm(loops)

    def layer(conv, h, dropout):
        h = conv.quant_x(h)
        if dropout is not None:
            h = dropout(h)
        return gcn(loops, nodes={"h": h @ conv.quant_w(conv.kernel[...]), "norm": norm}) + conv.bias[...]

    h = jax.nn.relu(layer(m.conv1, x, m.dropout if m.input_dropout else None))
    return layer(m.conv2, h, m.dropout)


def vertex_gat(m: GAT, x, loops: CooAdjacency, attention_impl: str = "auto"):
    """`GAT.__call__` (no edge mask, no attention dropout) with the `gat` program vmapped over heads."""

    def layer(conv, h):
        n = h.shape[0]
        h = m.dropout(conv.quant_x(h))
        z = (h @ conv.quant_w(conv.kernel[...])).reshape(n, conv.heads, conv.out_features)
        el, er = jnp.sum(z * conv.att_src[...], -1), jnp.sum(z * conv.att_dst[...], -1)
        run = lambda a, b, c: gat(loops, nodes={"h": a, "el": b, "er": c}, attention_impl=attention_impl)
        out = jax.vmap(run, in_axes=1, out_axes=1)(z, el, er)
        out = out.reshape(n, -1) if conv.concat else out.mean(axis=1)
        return out + conv.bias[...]

    return layer(m.conv2, jax.nn.elu(layer(m.conv1, x)))


def build(model: str, p: Problem, side: str, attention_impl: str = "auto"):
    """``(compiled step, state)`` of one side ("vertex" / "hand"); same init for both sides."""
    n_cls, f = int(p.y.max()) + 1, p.x.shape[1]
    rngs = nnx.Rngs(params=0, dropout=1)
    if model == "gcn":
        m = GCN(f, 16 if p.name == "cora" else 64, n_cls, dropout=0.5, rngs=rngs)
        fwd = (lambda mm, x, adj, loops: vertex_gcn(mm, x, loops)) if side == "vertex" else \
            (lambda mm, x, adj, loops: mm(x, adj))
    else:
        m = GAT(f, GAT_HIDDEN, n_cls, heads=HEADS, dropout=0.6, attn_dropout=0.0, rngs=rngs)
        fwd = (lambda mm, x, adj, loops: vertex_gat(mm, x, loops, attention_impl)) if side == "vertex" else \
            (lambda mm, x, adj, loops: mm(x, adj))
    m.train()
    tx = optax.chain(optax.add_decayed_weights(5e-4), optax.adam(0.01 if model == "gcn" else 0.005))
    graphdef, state = nnx.split((m, nnx.Optimizer(m, tx, wrt=nnx.Param)))

    def loss_fn(mm, x, y, mask, adj, loops):
        ce = optax.softmax_cross_entropy_with_integer_labels(fwd(mm, x, adj, loops), y)
        return jnp.sum(ce * mask) / jnp.maximum(mask.sum(), 1.0)

    def step(state, x, y, mask, adj, loops):  # the graph is an argument: nothing is folded at compile time
        mm, opt = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(loss_fn)(mm, x, y, mask, adj, loops)
        opt.update(mm, grads)
        return nnx.state((mm, opt)), loss

    t0 = time.perf_counter()
    compiled = jax.jit(step, donate_argnums=0).lower(state, *data(p)).compile()
    return compiled, state, time.perf_counter() - t0


def data(p: Problem) -> tuple:
    return p.x, p.y, p.mask, p.adj, p.loops


def memory(compiled) -> dict:
    ma = compiled.memory_analysis()
    return {"temp_bytes": int(ma.temp_size_in_bytes), "argument_bytes": int(ma.argument_size_in_bytes),
            "output_bytes": int(ma.output_size_in_bytes)}


_HLO_ARRAY = re.compile(r"\b(?:f64|f32|f16|bf16|s64|s32|s16|s8|u64|u32|u16|u8|pred)\[([0-9,]*)\]")


def largest_edge_array(hlo_text: str, n_edges: int, factors: tuple) -> int:
    """Elements of the largest array in an optimized HLO module (fused computations included, so
    values that stay inside a fusion count too: an upper bound on what is materialized) that has
    an edge-sized dimension: ``n_edges`` times any product of ``factors`` (an [E, H, F] tensor in
    any layout or flattening has one)."""
    sizes = {n_edges}
    for f in factors:
        sizes |= {s * f for s in sizes}
    best = 0
    for m in _HLO_ARRAY.findall(hlo_text):
        dims = [int(d) for d in m.split(",") if d]
        if any(d in sizes for d in dims):
            best = max(best, int(np.prod(dims, dtype=np.int64)))
    return best


def ehf_check(p: Problem, compiled: dict) -> dict:
    """The GAT [E', heads, F] check on the compiled train steps: the vertex step on the fused CSR
    path (attention_impl "csr", compiled here; "auto" picks by modeled cost, which may be the
    reference on small graphs), ``compiled["hand"]`` (as timed), and the vertex step on the reference path
    (compiled here: its XLA gather + segment ops do form the tensor, which shows the check bites).
    Per step: XLA's temporaries (``memory_analysis``), the largest edge-sized array in the
    optimized HLO (`largest_edge_array`) and whether it is below E' x heads x F elements, and any
    [E', heads, F]-like shape found."""
    e = p.loops.n_edges
    ehf = e * HEADS * GAT_HIDDEN
    shapes = sorted({f"f32[{e},{HEADS},{GAT_HIDDEN}]", f"f32[{HEADS},{e},{GAT_HIDDEN}]",
                     f"f32[{e * HEADS},{GAT_HIDDEN}]", f"f32[{e},{GAT_HIDDEN},{HEADS}]"})
    out = {"edges_with_loops": e, "ehf_elements": ehf}
    steps = {"vertex": build("gat", p, "vertex", "csr")[0], "vertex_reference": build("gat", p, "vertex", "reference")[0],
             "hand": compiled["hand"]}
    for name, step in steps.items():
        text = step.as_text()
        largest = largest_edge_array(text, e, (HEADS, GAT_HIDDEN))
        out[name] = {"temp_bytes": memory(step)["temp_bytes"], "largest_edge_array_elements": largest,
                     "no_ehf_tensor": largest < ehf, "ehf_shapes_in_hlo": [s for s in shapes if s in text]}
    return out


def time_pair(model: str, p: Problem, reps: int) -> dict:
    sides = {}
    for side in ("vertex", "hand"):
        compiled, state, compile_s = build(model, p, side)
        state, loss = jax.block_until_ready(compiled(state, *data(p)))  # first step, untimed
        sides[side] = dict(compiled=compiled, state=state, compile_s=compile_s, times=[], memory=memory(compiled))
    for _ in range(reps):  # alternating, one process
        for side in ("vertex", "hand"):
            s = sides[side]
            t0 = time.perf_counter()
            s["state"], loss = jax.block_until_ready(s["compiled"](s["state"], *data(p)))
            s["times"].append(time.perf_counter() - t0)
            s["loss"] = float(loss)
    out = {"_compiled": {side: s["compiled"] for side, s in sides.items()}}
    for side, s in sides.items():
        t = np.asarray(s["times"])
        out[side] = {"epoch_s_median": float(np.median(t)), "epoch_s_min": float(t.min()), "epoch_s_max": float(t.max()),
                     "compile_s": s["compile_s"], "final_loss": s["loss"], "xla_memory": s["memory"]}
    out["ratio_vertex_over_hand"] = out["vertex"]["epoch_s_median"] / out["hand"]["epoch_s_median"]
    return out


def child(args) -> dict:
    """Peak RSS of one side in this (fresh) process above the RSS after loading the graph: over
    compile + first step, and over the 3 steps after it (steady training)."""
    p = load_problem(args.graph, args.quick, args.rmat_scale, args.rmat_draws)
    jax.block_until_ready((p.x, p.adj, p.loops))
    base = rss_mib()
    reset_peak()
    compiled, state, _ = build(args.child, p, args.side)
    state, loss = jax.block_until_ready(compiled(state, *data(p)))
    first = peak_mib() - base
    reset_peak()
    for _ in range(3):
        state, loss = jax.block_until_ready(compiled(state, *data(p)))
    return {"peak_rss_mib_compile_and_first_step": first, "peak_rss_mib_steps": peak_mib() - base}


def rss_in_child(graph: str, model: str, side: str, args) -> dict:
    cmd = [sys.executable, __file__, "--child", model, "--side", side, "--graph", graph,
           "--rmat-scale", str(args.rmat_scale), "--rmat-draws", str(args.rmat_draws)] + (["--quick"] if args.quick else [])
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=None, help="timed epochs per side (default 20, quick 3)")
    ap.add_argument("--rmat-scale", type=int, default=15)
    ap.add_argument("--rmat-draws", type=int, default=280_000)
    ap.add_argument("--models", default="gcn,gat")
    ap.add_argument("--no-rss", action="store_true", help="skip the per-side peak-RSS child processes")
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--side", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--graph", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return {}
    reps = args.reps or (3 if args.quick else 20)
    graphs = ("quick",) if args.quick else ("cora", "rmat")
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device": f"{jax.default_backend()} ({platform.processor() or platform.machine()}, "
                        f"{len(os.sched_getaffinity(0))} cores visible)",
              "jax": jax.__version__, "reps": reps, "quick": args.quick, "graphs": {}}
    for gname in graphs:
        p = load_problem(gname, args.quick, args.rmat_scale, args.rmat_draws)
        entry = {"n_nodes": p.adj.n_nodes, "n_edges": p.adj.n_edges, "features": p.x.shape[1]}
        for model in args.models.split(","):
            entry[model] = time_pair(model, p, reps)
            if not args.no_rss:
                for side in ("vertex", "hand"):
                    entry[model][side].update(rss_in_child(gname, model, side, args))
            print(f"{gname} {model}: vertex {entry[model]['vertex']['epoch_s_median']:.4f} s/epoch, hand "
                  f"{entry[model]['hand']['epoch_s_median']:.4f} (ratio {entry[model]['ratio_vertex_over_hand']:.3f})",
                  flush=True)
        if "gat" in entry:
            entry["gat_ehf_check"] = ehf_check(p, entry["gat"]["_compiled"])
        for model in args.models.split(","):
            del entry[model]["_compiled"]
        result["graphs"][gname] = entry
    out = args.out or f"results/vertex_bench_{jax.default_backend()}{'_quick' if args.quick else ''}.json"
    write_json_atomic(out, result)
    return result


if __name__ == "__main__":
    main()
